package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// settingsFlags is a get-like flag set reading settings from getenv.
func settingsFlags(t *testing.T, name string, getenv map[string]string) (*flagSet, *int, *[]string) {
	t.Helper()
	e := &env{stdout: &strings.Builder{}, stderr: &strings.Builder{}, getenv: func(k string) string { return getenv[k] }}
	f := newFlagSet(e, name, "", "")
	parallel := f.Int("parallel", 16, "")
	trackers := f.StringArray("tracker", nil, "")
	return f, parallel, trackers
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSettingsPrecedence: the command line over STAMPEDE_COMMAND_FLAG over
// STAMPEDE_FLAG over the config file's [command] table over its top level
// over the default.
func TestSettingsPrecedence(t *testing.T) {
	cfg := writeConfig(t, "parallel = 2\n[get]\nparallel = 3\n")
	top := writeConfig(t, "parallel = 2\n")
	for _, c := range []struct {
		env  map[string]string
		args []string
		want int
	}{
		{map[string]string{}, nil, 16},
		{map[string]string{"STAMPEDE_CONFIG": top}, nil, 2},
		{map[string]string{"STAMPEDE_CONFIG": cfg}, nil, 3},
		{map[string]string{"STAMPEDE_CONFIG": cfg, "STAMPEDE_PARALLEL": "4"}, nil, 4},
		{map[string]string{"STAMPEDE_CONFIG": cfg, "STAMPEDE_PARALLEL": "4", "STAMPEDE_GET_PARALLEL": "5"}, nil, 5},
		{map[string]string{"STAMPEDE_CONFIG": cfg, "STAMPEDE_PARALLEL": "4", "STAMPEDE_GET_PARALLEL": "5"}, []string{"--parallel", "6"}, 6},
		{map[string]string{"STAMPEDE_PARALLEL": "4"}, []string{"--config", top}, 4},
		{map[string]string{"STAMPEDE_SERVE_PARALLEL": "9"}, nil, 16}, // another command's
	} {
		f, parallel, _ := settingsFlags(t, "get", c.env)
		if _, err := f.parse(c.args); err != nil || *parallel != c.want {
			t.Errorf("env %v, args %q: parallel %d (%v), want %d", c.env, c.args, *parallel, err, c.want)
		}
	}
}

// TestSettingsDefaultFile: the config file is found in the XDG place, and
// its absence there is no error.
func TestSettingsDefaultFile(t *testing.T) {
	dir := t.TempDir()
	f, parallel, _ := settingsFlags(t, "get", map[string]string{"XDG_CONFIG_HOME": dir})
	if _, err := f.parse(nil); err != nil || *parallel != 16 {
		t.Fatalf("no config file: %d, %v", *parallel, err)
	}
	os.MkdirAll(filepath.Join(dir, "stampede"), 0o755)
	os.WriteFile(filepath.Join(dir, "stampede", "config.toml"), []byte("[get]\nparallel = 7\n"), 0o600)
	f, parallel, _ = settingsFlags(t, "get", map[string]string{"XDG_CONFIG_HOME": dir})
	if _, err := f.parse(nil); err != nil || *parallel != 7 {
		t.Errorf("XDG config: %d, %v", *parallel, err)
	}
}

// TestSettingsRepeatable: a repeatable flag adds up across the levels.
func TestSettingsRepeatable(t *testing.T) {
	cfg := writeConfig(t, "[serve]\ntracker = [\"http://a/\", \"http://b/\"]\n")
	f, _, trackers := settingsFlags(t, "serve", map[string]string{"STAMPEDE_CONFIG": cfg})
	if _, err := f.parse([]string{"--tracker", "http://c/"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(*trackers, " "); got != "http://a/ http://b/ http://c/" {
		t.Errorf("trackers %q", got)
	}
}

// TestSettingsErrors: a typo or a bad value is an error naming where it
// is, with exit code 2; a config file named but missing too.
func TestSettingsErrors(t *testing.T) {
	for _, c := range []struct {
		config, env, want string
	}{
		{"paralel = 2\n", "", "no command has a flag --paralel"},
		{"[get]\nlisten = \":1\"\n", "", "[get]: get has no flag --listen"},
		{"[gett]\nparallel = 2\n", "", "[gett]: no such command"},
		{"[get]\nparallel = \"many\"\n", "", `[get]: --parallel "many"`},
		{"parallel = 2020-01-01\n", "", "cannot be a flag's value"},
		{"parallel = \n", "", "config"},
		{"", "STAMPEDE_GET_PARALLEL", `STAMPEDE_GET_PARALLEL: --parallel "x"`},
	} {
		env := map[string]string{}
		if c.config != "" {
			env["STAMPEDE_CONFIG"] = writeConfig(t, c.config)
		}
		if c.env != "" {
			env[c.env] = "x"
		}
		f, _, _ := settingsFlags(t, "get", env)
		_, err := f.parse(nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q env %q: %v, want an error with %q", c.config, c.env, err, c.want)
		}
	}
	f, _, _ := settingsFlags(t, "get", nil)
	if _, err := f.parse([]string{"--config", filepath.Join(t.TempDir(), "none.toml")}); err == nil {
		t.Error("a missing --config file was accepted")
	}
	// Help and version still work past a broken config file.
	bad := map[string]string{"STAMPEDE_CONFIG": writeConfig(t, "[[[")}
	for _, args := range [][]string{{"version"}, {"help", "get"}, {"get", "--help"}} {
		var stdout, stderr strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return bad[k] }}
		if code := run(t.Context(), args, e); code != exitOK {
			t.Errorf("%v with a broken config: exit %d: %s", args, code, stderr.String())
		}
	}
	var stderr strings.Builder
	e := &env{stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: &stderr, getenv: func(k string) string { return bad[k] }}
	if code := run(t.Context(), []string{"get", "http://127.0.0.1:1/x"}, e); code != exitUsage || !strings.Contains(stderr.String(), "config") {
		t.Errorf("get with a broken config: exit %d: %s", code, stderr.String())
	}
}

// TestSettingsAreNotCommandLine: a setting is not a choice made on the
// command line: get's --api from the environment (the daemon's address,
// for the gets that use it) does not stop a plain get, and a config's
// [get] limit-rate does not stop get --daemon.
func TestSettingsAreNotCommandLine(t *testing.T) {
	runEnv := func(vars map[string]string, args ...string) (int, string) {
		var stderr strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: &stderr, getenv: func(k string) string { return vars[k] }}
		return run(t.Context(), args, e), stderr.String()
	}
	sock := filepath.Join(t.TempDir(), "api.sock")
	code, stderr := runEnv(map[string]string{"STAMPEDE_API": sock}, "get", "-q", "--retries", "0", "-o", filepath.Join(t.TempDir(), "f"), "http://127.0.0.1:1/f")
	if code != exitNetwork {
		t.Errorf("plain get with STAMPEDE_API set: exit %d: %s", code, stderr)
	}
	cfg := writeConfig(t, "[get]\nlimit-rate = \"20MB\"\n")
	code, stderr = runEnv(map[string]string{"STAMPEDE_CONFIG": cfg, "STAMPEDE_LOG_FORMAT": "json"}, "get", "--daemon", "--api", sock, "http://127.0.0.1:1/f")
	if strings.Contains(stderr, "not with --daemon") {
		t.Errorf("get --daemon with settings for get: exit %d: %s", code, stderr)
	}
	// On the command line, still refused.
	if code, stderr := runEnv(nil, "get", "--daemon", "--api", sock, "--limit-rate", "1MB", "http://127.0.0.1:1/f"); code != exitUsage || !strings.Contains(stderr, "--limit-rate: not with --daemon") {
		t.Errorf("get --daemon --limit-rate: exit %d: %s", code, stderr)
	}
	if code, stderr := runEnv(nil, "get", "--api", sock, "http://127.0.0.1:1/f"); code != exitUsage || !strings.Contains(stderr, "go with --daemon") {
		t.Errorf("get --api without --daemon: exit %d: %s", code, stderr)
	}
}
