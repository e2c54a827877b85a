// Package consoleui holds the web page of `starter console` (internal/cli):
// one HTML page, its script and its style sheet, embedded in the binary so
// the console loads nothing from anywhere else. The page renders every value
// with textContent (never as HTML) and talks only to the console's own
// /api/session, /api/questions and /api/decide, so it runs under a
// Content-Security-Policy without inline script or style. The page holds no
// secret: its script exchanges the one-time token of the printed link (in
// the URL's fragment) for the session secret, kept in the origin's
// localStorage and sent in the X-Agentsaga-Session header.
//
// It is internal: not API.
package consoleui

import (
	"embed"
	"html/template"
	"io/fs"
)

//go:embed assets
var assets embed.FS

// Static is the page's script and style sheet, served under /static/.
func Static() fs.FS {
	sub, err := fs.Sub(assets, "assets/static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// Page is the console's HTML page; it takes a PageData.
var Page = template.Must(template.ParseFS(assets, "assets/index.html"))

// PageData fills the page.
type PageData struct {
	// Operator is who the console decides as, and Verified whether it
	// signs (an operator key) or sends a typed name.
	Operator string
	Verified bool
}
