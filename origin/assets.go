package origin

import (
	"io"
	"net/url"
	"strings"

	"golang.org/x/net/html"
)

// Finding the assets of an HTML page: the same-origin resources a browser
// fetches to show it. The page is tokenized (golang.org/x/net/html, which
// knows that <script> and <style> hold text, not tags, and unescapes
// attribute values) and these references are collected, in document order:
//
//	img src, srcset          script src           link href (rel stylesheet,
//	source src, srcset       video src, poster    icon, apple-touch-icon,
//	audio src                track src            mask-icon, preload,
//	input type=image src     embed src            modulepreload), imagesrcset
//	object data
//
// Only relative and root-relative references count: an absolute URL, even
// one naming this origin, is left out, since the origin does not know under
// which names it is reached. They are resolved against the page's path, or
// against the first <base href> if it is relative (an absolute one makes
// every reference cross-origin: nothing is collected). Query and fragment
// are dropped, as the files served ignore them. Nothing inside CSS (url(),
// @import) or inside <noscript> is followed.

// maxPageParse is how much of a page is read for its assets.
const maxPageParse = 4 << 20

// maxCandidates bounds the references collected from one page, before
// checking which of them are files.
const maxCandidates = 1024

// linkRels are the rel tokens of <link> elements whose href a browser
// fetches to show the page.
var linkRels = map[string]bool{
	"stylesheet": true, "icon": true, "apple-touch-icon": true, "apple-touch-icon-precomposed": true,
	"mask-icon": true, "preload": true, "modulepreload": true,
}

// pageAssets returns the URL paths of the same-origin assets referenced by
// the HTML page read from r, which is served at URL path pagePath: resolved,
// de-duplicated, without the page itself, at most maxCandidates. An error
// is one of r's.
func pageAssets(r io.Reader, pagePath string) ([]string, error) {
	z := html.NewTokenizer(io.LimitReader(r, maxPageParse))
	base := &url.URL{Path: pagePath}
	seen := map[string]bool{pagePath: true}
	var out []string
	add := func(ref string) {
		p, ok := resolveAsset(base, ref)
		if ok && !seen[p] && len(out) < maxCandidates {
			seen[p] = true
			out = append(out, p)
		}
	}
	baseSeen := false
	var a tagAttrs
	for {
		switch z.Next() {
		case html.ErrorToken:
			if err := z.Err(); err != io.EOF {
				return nil, err
			}
			return out, nil // the end, or maxPageParse
		case html.StartTagToken, html.SelfClosingTagToken:
		default:
			continue
		}
		tag, hasAttr := z.TagName()
		if !hasAttr {
			continue
		}
		a.read(z)
		switch string(tag) {
		case "base":
			if baseSeen || a.href == "" {
				continue
			}
			baseSeen = true
			u, err := url.Parse(strings.TrimSpace(a.href))
			if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" {
				return nil, nil // every relative reference now points elsewhere
			}
			base = base.ResolveReference(u)
		case "img", "source":
			add(a.src)
			for _, u := range srcsetURLs(a.srcset) {
				add(u)
			}
		case "script", "audio", "track", "embed":
			add(a.src)
		case "video":
			add(a.src)
			add(a.poster)
		case "input":
			if strings.EqualFold(strings.TrimSpace(a.typ), "image") {
				add(a.src)
			}
		case "object":
			add(a.data)
		case "link":
			for rel := range strings.FieldsSeq(strings.ToLower(a.rel)) {
				if linkRels[rel] {
					add(a.href)
					for _, u := range srcsetURLs(a.imagesrcset) {
						add(u)
					}
					break
				}
			}
		}
	}
}

// tagAttrs are the attributes of one tag that pageAssets looks at.
type tagAttrs struct {
	src, srcset, href, rel, poster, data, typ, imagesrcset string
}

func (a *tagAttrs) read(z *html.Tokenizer) {
	*a = tagAttrs{}
	for {
		key, val, more := z.TagAttr() // keys come lower-cased
		var dst *string
		switch string(key) {
		case "src":
			dst = &a.src
		case "srcset":
			dst = &a.srcset
		case "href":
			dst = &a.href
		case "rel":
			dst = &a.rel
		case "poster":
			dst = &a.poster
		case "data":
			dst = &a.data
		case "type":
			dst = &a.typ
		case "imagesrcset":
			dst = &a.imagesrcset
		}
		if dst != nil && *dst == "" { // the first of repeated attributes wins, as in browsers
			*dst = string(val)
		}
		if !more {
			return
		}
	}
}

// resolveAsset resolves ref against base and returns the URL path it
// names, if ref is relative or root-relative and names something other
// than the page itself.
func resolveAsset(base *url.URL, ref string) (string, bool) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return "", false
	}
	u, err := url.Parse(ref)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || u.Path == "" {
		return "", false
	}
	return base.ResolveReference(u).Path, true
}

// srcsetURLs returns the URLs of a srcset attribute: candidates separated
// by commas, each a URL (a run of non-space characters; trailing commas
// end the candidate) and optional descriptors ("2x", "480w").
func srcsetURLs(s string) []string {
	var out []string
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }
	for i := 0; i < len(s); {
		for i < len(s) && (isSpace(s[i]) || s[i] == ',') {
			i++
		}
		start := i
		for i < len(s) && !isSpace(s[i]) {
			i++
		}
		u := s[start:i]
		trimmed := strings.TrimRight(u, ",")
		if trimmed != "" {
			out = append(out, trimmed)
		}
		if len(trimmed) < len(u) {
			continue // the commas ended the candidate
		}
		// Skip the descriptors, up to a comma outside parentheses.
		for depth := 0; i < len(s) && (s[i] != ',' || depth > 0); i++ {
			switch s[i] {
			case '(':
				depth++
			case ')':
				depth = max(depth-1, 0)
			}
		}
	}
	return out
}
