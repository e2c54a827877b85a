package probe

import (
	"fmt"
	"io"
	"strings"
)

// WriteText prints r for people: one line per verdict with its evidence
// below it, then the settings that are safe.
//
//	send_email (NON_IDEMPOTENT_WRITE): 5 probe sends
//	  key     agrees       ignores the key: two effects
//	          declared: class NON_IDEMPOTENT_WRITE (a second send is a second effect)
//	          send 1 under key probe-...:1:1:send_email: 8BqT...
//	  ...
//	  safe settings: class: NON_IDEMPOTENT_WRITE, settle: 1s, lookup.lag: 0s, absent.authoritative: true
//	  verdict: the provider agrees with the catalogue
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %d probe sends\n", r.Tool, r.Class, r.Sends)
	for _, v := range r.Verdicts {
		fmt.Fprintf(&b, "  %-7s %-12s %s\n", v.Promise, v.Outcome, v.Finding)
		fmt.Fprintf(&b, "          declared: %s\n", v.Declared)
		for _, e := range v.Evidence {
			fmt.Fprintf(&b, "          %s\n", e)
		}
	}
	fmt.Fprintf(&b, "  safe settings: %s\n", r.Safe)
	if r.Contradicted() {
		var which []string
		for _, v := range r.Verdicts {
			if v.Outcome == Contradicts {
				which = append(which, v.Promise)
			}
		}
		fmt.Fprintf(&b, "  verdict: the provider CONTRADICTS the tool's settings (%s)\n", strings.Join(which, ", "))
	} else {
		fmt.Fprintf(&b, "  verdict: the provider agrees with the tool's settings\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String prints the safe settings as catalogue keys.
func (s Settings) String() string {
	parts := []string{"class: " + string(s.Class)}
	if !s.Lookup {
		return parts[0] + " (no lookup: settle, lag and authoritative do not apply)"
	}
	if s.Settle > 0 {
		parts = append(parts, "settle: "+s.Settle.String())
	} else {
		parts = append(parts, "settle: (the default; nothing landed late)")
	}
	parts = append(parts, "lookup.lag: "+s.Lag.String())
	if s.Authoritative {
		parts = append(parts, "lookup.absent.authoritative: true")
	} else {
		parts = append(parts, "lookup.absent.authoritative: false")
	}
	return strings.Join(parts, ", ")
}
