package node

import (
	"os"
	"sync"
)

// The testbed's corrupting peer (docs/testbed.md, "fault = corrupt K").
//
// With STAMPEDETEST_CORRUPT_UPLOADS=1 in its environment, a node flips
// one byte of every piece it uploads, after reading and verifying it from
// its store: its own download and its file stay intact, and what it sends
// other peers fails their verification, as data from a faulty or malicious
// peer would. It is a test hook, not a setting: no flag sets it, `stampede
// help` does not name it, and a node that has it on logs a warning at its
// first upload. Its name is outside STAMPEDE_*, the settings' namespace
// (README, Configuration). It costs peers nothing they do not already defend against
// (they verify every piece and ban the sender), only wasted upload.
const corruptUploadsEnv = "STAMPEDETEST_CORRUPT_UPLOADS"

var corruptUploads = os.Getenv(corruptUploadsEnv) == "1"

var corruptWarn sync.Once

// testbedCorrupt damages data, a piece about to be uploaded, when the hook
// is on; data is the connection's own buffer, read afresh for each piece.
func (p *peerConn) testbedCorrupt(data []byte) {
	if !corruptUploads || len(data) == 0 {
		return
	}
	corruptWarn.Do(func() {
		p.n.log.Warn("testbed hook: uploading corrupt pieces on purpose", "env", corruptUploadsEnv)
	})
	data[len(data)/2] ^= 0xff
}
