package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/stampede-dev/stampede/fetch"
)

// getTarget is one URL of a get and where it goes.
type getTarget struct {
	url *url.URL // without user:password@
	// user is the URL's user:password@, sent as Basic credentials.
	user *url.Userinfo
	// output is -o, or the remote name, in --output-dir; "-" for stdout.
	// A directory there takes the remote name if -o named it
	// (outputTarget).
	output string
	named  bool // output is -o's, not the remote name
	// where names the URL in errors: "argument 2" or "FILE:LINE".
	where string
}

// listedURL is a URL as given, and where.
type listedURL struct{ raw, where string }

// getURLs returns the URLs of the command line, then those of -i FILE
// ("-": standard input).
func getURLs(e *env, args []string, inputFile string) ([]listedURL, error) {
	var urls []listedURL
	for i, a := range args {
		urls = append(urls, listedURL{a, fmt.Sprintf("argument %d", i+1)})
	}
	if inputFile == "" {
		return urls, nil
	}
	r, name := e.stdin, "stdin"
	if inputFile != "-" {
		f, err := os.Open(inputFile)
		if err != nil {
			return nil, usageErrorf("-i: %v", err)
		}
		defer f.Close()
		r, name = f, inputFile
	}
	listed, err := readURLList(r, name)
	if err != nil {
		return nil, err
	}
	return append(urls, listed...), nil
}

// readURLList reads aria2's -i format, without its options: one URL per
// line; blank lines and lines starting with # are skipped. aria2's
// indented option lines ("  out=FILE") and its tab-separated mirrors are
// refused rather than misread as URLs.
func readURLList(r io.Reader, name string) ([]listedURL, error) {
	var urls []listedURL
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), " \t\r")
		trimmed := strings.TrimLeft(line, " \t")
		where := fmt.Sprintf("%s:%d", name, n)
		switch {
		case trimmed == "", strings.HasPrefix(trimmed, "#"):
			continue
		case trimmed != line:
			return nil, usageErrorf("-i %s: an indented line is an aria2 option, which stampede does not take; one URL per line", where)
		case strings.ContainsAny(line, " \t"):
			return nil, usageErrorf("-i %s: one URL per line (aria2's mirrors on one line are not taken)", where)
		}
		urls = append(urls, listedURL{line, where})
	}
	if err := sc.Err(); err != nil {
		return nil, usageErrorf("-i %s: %v", name, err)
	}
	return urls, nil
}

// getTargets parses the URLs, takes their credentials out, and chooses
// each one's output: -o (with one URL) or the remote name, in outputDir
// unless absolute. Two URLs that would write the same file are refused
// before anything is downloaded.
func getTargets(urls []listedURL, output, outputDir string) ([]getTarget, error) {
	targets := make([]getTarget, 0, len(urls))
	by := map[string]string{} // output -> where
	for _, l := range urls {
		u, err := url.Parse(l.raw)
		if ue, ok := errors.AsType[*url.Error](err); ok {
			ue.URL = redactUserinfo(ue.URL) // its message quotes the URL
		}
		if err == nil {
			// Out before fetch.ParseURL, whose errors quote the URL.
			who := stripUserinfo(u)
			if u, err = fetch.ParseURL(u.String()); err == nil {
				u.User = who
			}
		}
		if err != nil {
			if len(urls) == 1 {
				return nil, withCode(exitUsage, err)
			}
			return nil, withCode(exitUsage, fmt.Errorf("%s: %w", l.where, err))
		}
		t := getTarget{url: u, user: stripUserinfo(u), output: output, named: output != "", where: l.where}
		if t.output == "" {
			t.output = fetch.RemoteName(u)
		}
		if t.output != "-" && outputDir != "" && !filepath.IsAbs(t.output) {
			t.output = filepath.Join(outputDir, t.output)
		}
		key := filepath.Clean(t.output)
		if prev, ok := by[key]; ok && t.output != "-" {
			return nil, usageErrorf("%s and %s would both be saved as %s", prev, l.where, t.output)
		}
		by[key] = l.where
		targets = append(targets, t)
	}
	return targets, nil
}

// redactUserinfo replaces the user:password@ of a URL that may not parse
// with "***@", so that no error repeats a password.
func redactUserinfo(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return raw
	}
	return raw[:i+3] + "***@" + rest[at+1:]
}
