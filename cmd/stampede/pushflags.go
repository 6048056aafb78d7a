package main

import (
	"strconv"
	"strings"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/sign"
)

// pushAgentFlags are the daemon's flags of the push service, the agent of
// "stampede push" (docs/push.md).
type pushAgentFlags struct {
	fs                         *flagSet
	cluster, key, host, listen string
	prefixes                   []string
	maxLoad, maxIOWait         string
}

func addPushAgentFlags(fs *flagSet) *pushAgentFlags {
	f := &pushAgentFlags{fs: fs}
	fs.StringVar(&f.cluster, "cluster", "", "run the push service of the cluster described in TOML `FILE` (docs/push.md)")
	fs.StringVar(&f.key, "cluster-key", "", "carry out only pushes signed by this ed25519 public `KEY` (a file from stampede keygen, or ed25519:...)")
	fs.StringVar(&f.host, "cluster-host", "", "this host's `NAME` in the cluster file (default: the host name)")
	fs.StringVar(&f.listen, "push-listen", "", "take push requests on `HOST:PORT` (default: the port of this host's agent address, every interface)")
	fs.StringArrayVar(&f.prefixes, "push-dest-prefix", nil, "pushes may install only under `DIR` (repeatable; required with --cluster)")
	fs.StringVar(&f.maxLoad, "max-load", "0", "slow pushes' disk writes and uploads while the load average per CPU is above `N` (0: never)")
	fs.StringVar(&f.maxIOWait, "max-iowait", "0", "slow them while tasks wait on IO more than this share of the time, `PCT` such as 30% (Linux PSI where present; 0: never)")
	return f
}

// pushOnlyFlags configure the push service alone: given without
// --cluster, they would do nothing.
var pushOnlyFlags = []string{"cluster-key", "cluster-host", "push-listen", "push-dest-prefix", "max-load", "max-iowait"}

// apply fills cfg.Push; nothing without --cluster, where any of the push
// service's flags is a usage error rather than ignored.
func (f *pushAgentFlags) apply(cfg *daemon.Config) error {
	if f.cluster == "" {
		var given []string
		for _, name := range pushOnlyFlags {
			if f.fs.Changed(name) {
				given = append(given, "--"+name)
			}
		}
		switch len(given) {
		case 0:
			return nil
		case 1:
			return usageErrorf("%s configures the push service: it needs --cluster FILE", given[0])
		}
		return usageErrorf("%s configure the push service: they need --cluster FILE", strings.Join(given, ", "))
	}
	c, err := cluster.Load(f.cluster)
	if err != nil {
		return usageErrorf("--cluster: %v", err)
	}
	if f.key == "" {
		return usageErrorf("--cluster needs --cluster-key: the public key pushes must be signed with")
	}
	key, err := sign.LoadPublicKey(f.key)
	if err != nil {
		return usageErrorf("--cluster-key %s: %v", f.key, err)
	}
	if len(f.prefixes) == 0 {
		return usageErrorf("--cluster needs --push-dest-prefix DIR: where pushes may install files")
	}
	p := &cfg.Push
	p.Cluster, p.Key, p.Host, p.DestPrefixes = c, key, f.host, f.prefixes
	if p.MaxLoad, err = strconv.ParseFloat(f.maxLoad, 64); err != nil || p.MaxLoad < 0 {
		return usageErrorf("--max-load %q: want a load per CPU such as 1.5, or 0", f.maxLoad)
	}
	if p.MaxIOWait, err = parseShare(f.maxIOWait); err != nil {
		return usageErrorf("--max-iowait %q: want a share such as 30%% or 0.3, or 0", f.maxIOWait)
	}
	p.Listen = f.listen
	return nil
}

// parseShare parses "30%" or "0.3" as 0.3.
func parseShare(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if pct {
		v /= 100
	}
	if err != nil || v < 0 || v > 1 {
		return 0, strconv.ErrSyntax
	}
	return v, nil
}
