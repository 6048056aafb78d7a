package cdn

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestClusterOneCopy: many clients at once on every node, and the origin
// sends about one copy of the file, with a manifest and without.
func TestClusterOneCopy(t *testing.T) {
	for _, withManifest := range []bool{true, false} {
		t.Run(fmt.Sprintf("manifest=%v", withManifest), func(t *testing.T) {
			o := newTestOrigin(t)
			data := randomBytes(4<<20+123, 1)
			o.add("f", data, withManifest, nil)
			nodes := startCluster(t, 4, o, nil)
			const clients = 16
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for c := range clients {
				wg.Go(func() {
					resp, body, err := get(t, nodes[c%len(nodes)].url(o.URL+"/f"))
					switch {
					case err != nil:
						errs <- err
					case resp.StatusCode != 200:
						errs <- fmt.Errorf("status %d", resp.StatusCode)
					case !bytes.Equal(body, data):
						errs <- fmt.Errorf("client %d: body differs (%d bytes)", c, len(body))
					case resp.Header.Get(Header) != "chunks":
						errs <- fmt.Errorf("client %d: answered %q", c, resp.Header.Get(Header))
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			sent := o.bodyBytes.Load() // the manifest is not counted
			if copies := float64(sent) / float64(len(data)); copies > 1.1 {
				t.Errorf("the origin sent %.2f copies, want about 1", copies)
			}
			t.Logf("origin: %d body bytes (%.3f copies), %d HEADs, %d GETs", sent, float64(sent)/float64(len(data)), o.heads.Load(), o.gets.Load())
		})
	}
}
