package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"
)

// Settings that do not come from the command line, applied before it is
// parsed so that it wins. From lowest to highest:
//
//  1. the config file's top level, for every command with such a flag;
//  2. its [COMMAND] table;
//  3. STAMPEDE_FLAG in the environment, for every command with the flag;
//  4. STAMPEDE_COMMAND_FLAG;
//  5. the command line.
//
// A flag's name in the environment is upper case with "_" for "-":
// --limit-rate is STAMPEDE_LIMIT_RATE, or STAMPEDE_GET_LIMIT_RATE for get
// alone. The config file is TOML, --config FILE, else $STAMPEDE_CONFIG,
// else $XDG_CONFIG_HOME/stampede/config.toml (~/.config/...) when it
// exists. A repeatable flag (--header, --tracker) adds up across the levels.
// README.md, "Configuration", says the same to users.

// envPrefix starts every environment variable stampede reads as a setting.
const envPrefix = "STAMPEDE_"

// noSettings are the commands that take nothing from the config file or the
// environment: they only describe stampede, and a broken config file must
// not stop them.
var noSettings = []string{"help", "version", "completion"}

// applySettings sets f's flags from the config file and the environment,
// before args (the command line) are parsed.
func (f *flagSet) applySettings(args []string) error {
	if slices.Contains(noSettings, f.Name()) || asksHelp(args) {
		return nil // help must show, even past a broken config file
	}
	path, required := f.configPath(args)
	if path != "" {
		if err := f.applyConfig(path, required); err != nil {
			return err
		}
	}
	return f.applyEnv()
}

// asksHelp reports whether args ask for the command's help.
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--help", "-help":
			return true
		}
	}
	return false
}

// configPath returns the config file to read, and whether it must exist
// (it was named rather than found in the default place).
func (f *flagSet) configPath(args []string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v, true
		}
		if a == "--config" && i+1 < len(args) {
			return args[i+1], true
		}
	}
	if f.e.getenv == nil {
		return "", false
	}
	if p := f.e.getenv(envPrefix + "CONFIG"); p != "" {
		return p, true
	}
	dir := f.e.getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := f.e.getenv("HOME")
		if home == "" {
			return "", false
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "stampede", "config.toml"), false
}

// applyConfig sets flags from the TOML file at path: its top-level keys
// for any command having the flag, its [NAME] table for this command.
// Keys no command knows are errors, so that a typo is not silently
// ignored.
func (f *flagSet) applyConfig(path string, required bool) error {
	var doc map[string]any
	if _, err := toml.DecodeFile(path, &doc); err != nil {
		if errors.Is(err, fs.ErrNotExist) && !required {
			return nil
		}
		return usageErrorf("config %s: %v", path, err)
	}
	var own map[string]any
	for key, v := range doc {
		table, isTable := v.(map[string]any)
		switch {
		case !isTable:
			if !anyCommandHasFlag(key) {
				return usageErrorf("config %s: no command has a flag --%s", path, key)
			}
			if f.Lookup(key) != nil {
				if err := f.setFrom(key, v, "config "+path); err != nil {
					return err
				}
			}
		case lookup(key) == nil:
			return usageErrorf("config %s: [%s]: no such command", path, key)
		case key == f.Name():
			own = table
		}
	}
	for key, v := range own {
		if f.Lookup(key) == nil || key == "help" || key == "config" {
			return usageErrorf("config %s: [%s]: %s has no flag --%s", path, f.Name(), f.Name(), key)
		}
		if err := f.setFrom(key, v, "config "+path+" ["+f.Name()+"]"); err != nil {
			return err
		}
	}
	return nil
}

// applyEnv sets flags from STAMPEDE_FLAG, then STAMPEDE_COMMAND_FLAG.
// Variables naming no flag of this command are left alone: they may be
// another command's.
func (f *flagSet) applyEnv() error {
	if f.e.getenv == nil {
		return nil
	}
	cmd := envName(f.Name()) + "_"
	for _, specific := range []bool{false, true} {
		var err error
		f.VisitAll(func(fl *pflag.Flag) {
			if err != nil || fl.Name == "help" || fl.Name == "config" {
				return
			}
			name := envPrefix + envName(fl.Name)
			if specific {
				name = envPrefix + cmd + envName(fl.Name)
			}
			if v, ok := lookupEnv(f.e.getenv, name); ok {
				err = f.setFrom(fl.Name, v, name)
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// lookupEnv is getenv, telling an empty value from none: an empty
// STAMPEDE_FLAG sets nothing, as if it were absent.
func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func envName(flag string) string {
	return strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// setFrom sets flag name from a setting (a TOML value or an environment
// string); where names the setting in errors.
func (f *flagSet) setFrom(name string, v any, where string) error {
	var values []string
	switch v := v.(type) {
	case []any:
		for _, x := range v {
			s, err := settingString(x)
			if err != nil {
				return usageErrorf("%s: %s: %v", where, name, err)
			}
			values = append(values, s)
		}
	default:
		s, err := settingString(v)
		if err != nil {
			return usageErrorf("%s: %s: %v", where, name, err)
		}
		values = []string{s}
	}
	for _, s := range values {
		if err := f.Set(name, s); err != nil {
			return usageErrorf("%s: --%s %q: %v", where, name, s, err)
		}
	}
	if f.settings == nil {
		f.settings = map[string]string{}
	}
	f.settings[name] = f.Lookup(name).Value.String()
	return nil
}

// settingString is the command-line form of one setting's value.
func settingString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("a %T cannot be a flag's value (write it as a string)", v)
}

// anyCommandHasFlag reports whether some command has the flag name.
func anyCommandHasFlag(name string) bool {
	if name == "help" || name == "config" {
		return false
	}
	for i := range commands {
		if slices.Contains(noSettings, commands[i].name) {
			continue
		}
		if describe(&commands[i]).Lookup(name) != nil {
			return true
		}
	}
	return false
}

// stdGetenv is the process's environment, for stdEnv.
var stdGetenv = os.Getenv
