package catalog

import "time"

// LookupLag returns the lag the lookup of the HTTP tool called name
// declares (lookup.lag): how long a committed effect may stay invisible to
// it. Zero when it declares none, has no lookup or is not an HTTP tool of
// the catalogue. `starter tools probe` checks it against the provider.
func (c *Catalog) LookupLag(name string) time.Duration {
	for _, tl := range c.tools {
		var t *httpTool
		switch v := tl.(type) {
		case *httpTool:
			t = v
		case *reconcilingTool:
			t = v.httpTool
		}
		if t != nil && t.spec.Name == name && t.lookup != nil {
			return t.lookup.lag
		}
	}
	return 0
}
