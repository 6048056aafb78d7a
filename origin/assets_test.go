package origin

import (
	"slices"
	"strings"
	"testing"
)

func TestPageAssets(t *testing.T) {
	tests := []struct {
		name, page, html string
		want             []string
	}{
		{"kinds", "/index.html", `<!doctype html><html><head>
<link rel="stylesheet" href="css/site.css"><link rel="ICON shortcut" href="/favicon.ico">
<link rel="preload" as="image" href="hero.png" imagesrcset="hero-2x.png 2x">
<link rel="alternate" href="feed.xml"><link rel="canonical" href="/index.html">
<script src="js/app.js?v=3#x"></script><script>var s = "<img src=no.png>";</script>
<style>body { background: url(bg.png) }</style>
</head><body>
<img src="a.png" srcset="a-1x.png 1x, a-2x.png 2x"><IMG SRC="A.PNG">
<picture><source srcset="b.webp 480w,b-big.webp 960w" type="image/webp"><img src="b.png"></picture>
<video src="v.mp4" poster="poster.jpg"><track src="subs.vtt"></video><audio src="a.ogg"></audio>
<input type="image" src="button.png"><input type="text" src="not-an-image.png">
<embed src="e.swf"><object data="o.pdf"></object><iframe src="frame.html"></iframe>
<a href="other.html">a link is not an asset</a>
<!-- <img src="commented.png"> -->
</body></html>`,
			[]string{"/css/site.css", "/favicon.ico", "/hero.png", "/hero-2x.png", "/js/app.js", "/a.png", "/a-1x.png", "/a-2x.png",
				"/A.PNG", "/b.webp", "/b-big.webp", "/b.png", "/v.mp4", "/poster.jpg", "/subs.vtt", "/a.ogg", "/button.png", "/e.swf", "/o.pdf"}},
		{"resolution", "/docs/guide/page.html", `<img src="x.png"><img src="../up.png"><img src="/root.png">
<img src="../../../../escape.png"><img src="./x.png"><img src="sp%20ace.png"><img src="  padded.png  ">`,
			[]string{"/docs/guide/x.png", "/docs/up.png", "/root.png", "/escape.png", "/docs/guide/sp ace.png", "/docs/guide/padded.png"}},
		{"left out", "/p.html", `<img src="https://cdn.example/x.png"><img src="//cdn.example/y.png">
<img src="data:image/png;base64,AAAA"><img src="javascript:alert(1)"><img src="mailto:a@b">
<img src="p.html"><img src="#top"><img src="?q=1"><img src=""><img src="ok.png">`,
			[]string{"/ok.png"}},
		{"relative base", "/p.html", `<base href="/static/"><img src="x.png"><base href="/ignored/"><img src="y.png">`,
			[]string{"/static/x.png", "/static/y.png"}},
		{"absolute base", "/p.html", `<base href="https://cdn.example/"><img src="x.png">`, nil},
	}
	for _, tt := range tests {
		got, err := pageAssets(strings.NewReader(tt.html), tt.page)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

func TestSrcsetURLs(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a.png", []string{"a.png"}},
		{"a.png 1x, b.png 2x", []string{"a.png", "b.png"}},
		{" a.png 480w ,b.png 960w,", []string{"a.png", "b.png"}},
		{"a.png,, b.png", []string{"a.png", "b.png"}},
		{"a,b.png 1x", []string{"a,b.png"}}, // commas inside a URL stay
		{"a.png (max-width: 1px, x) 1x, c.png", []string{"a.png", "c.png"}},
	}
	for _, tt := range tests {
		if got := srcsetURLs(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("srcset %q: %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzPageAssets(f *testing.F) {
	f.Add(`<img src="a.png" srcset="b.png 2x, c.png"><link rel=stylesheet href=../s.css><base href=x/>`, "/d/p.html")
	f.Add(`<script src=//x></script><video poster="p q.jpg">`, "/p.html")
	f.Fuzz(func(t *testing.T, page, pagePath string) {
		if !strings.HasPrefix(pagePath, "/") {
			pagePath = "/" + pagePath
		}
		got, err := pageAssets(strings.NewReader(page), pagePath)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, p := range got {
			if !strings.HasPrefix(p, "/") || seen[p] || p == pagePath {
				t.Fatalf("asset %q in %q", p, got)
			}
			seen[p] = true
		}
		if len(got) > maxCandidates {
			t.Fatalf("%d assets", len(got))
		}
	})
}
