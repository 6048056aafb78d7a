package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The store's Lua: swarm.lua holds what the calls share, and announce.lua,
// peers.lua and stats.lua each define one call's function after it.
var (
	//go:embed swarm.lua
	swarmLua string
	//go:embed announce.lua
	announceLua string
	//go:embed peers.lua
	peersLua string
	//go:embed stats.lua
	statsLua string
)

// The calls go to Redis as functions of one library (FUNCTION LOAD, Redis
// 7), rather than as scripts: a script runs its whole text at every call,
// making each of its functions anew, where a library's text runs once,
// when it is loaded. The library and its functions are named after the
// code, so that trackers of different versions can share a Redis. A Redis
// without functions (before 7, or an in-process one for tests) is sent the
// same code as scripts.
var (
	libVersion = version(swarmLua + announceLua + peersLua + statsLua)

	announceScript = newScript("announce", "announceAll", announceLua)
	peersScript    = newScript("peers", "peers", peersLua)
	statsScript    = newScript("stats", "stats", statsLua)

	library = "#!lua name=stampede_tracker_" + libVersion + "\n" +
		swarmLua + announceLua + peersLua + statsLua +
		announceScript.register + peersScript.register + statsScript.register
)

func version(code string) string {
	sum := sha1.Sum([]byte(code))
	return hex.EncodeToString(sum[:8])
}

// A script is one of the store's calls.
type script struct {
	fn       string        // the library's function
	register string        // the library's line registering it
	eval     *redis.Script // the same, as a script
}

// newScript returns the call named name, which the Lua function entry in
// code (after swarm.lua) makes, given the arguments as a list.
func newScript(name, entry, code string) *script {
	fn := "stampede_tracker_" + name + "_" + libVersion
	return &script{
		fn:       fn,
		register: "redis.register_function('" + fn + "', function(_, args) return " + entry + "(args) end)\n",
		eval:     redis.NewScript(swarmLua + code + "\nreturn " + entry + "(ARGV)\n"),
	}
}

// run calls sc with args and returns its answer, a list: the library's
// function, loading the library first should Redis not have it (it
// restarted, or this version is new to it), or the script, on a Redis
// without functions.
func (s *Store) run(ctx context.Context, sc *script, args []any) ([]any, error) {
	if !s.scripts.Load() {
		res, err := s.rdb.FCall(ctx, sc.fn, nil, args...).Slice()
		switch {
		case err == nil || !isRedisError(err):
			return res, err
		case strings.HasPrefix(err.Error(), "ERR Function not found"):
			err = s.rdb.FunctionLoad(ctx, library).Err()
			if err == nil || isRedisError(err) && strings.Contains(err.Error(), "already exists") {
				return s.rdb.FCall(ctx, sc.fn, nil, args...).Slice()
			}
			if !noFunctions(err) {
				return nil, err
			}
			s.scripts.Store(true)
		case noFunctions(err):
			s.scripts.Store(true)
		default:
			return res, err
		}
	}
	return sc.eval.Run(ctx, s.rdb, nil, args...).Slice()
}

// isRedisError reports whether err is an error Redis answered (as opposed
// to one reaching it).
func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// noFunctions reports whether err says that Redis has no functions, or
// does not let the store use them.
func noFunctions(err error) bool {
	msg := strings.ToLower(err.Error())
	return isRedisError(err) && (strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "noperm"))
}
