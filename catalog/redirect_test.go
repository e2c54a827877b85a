package catalog_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// elsewhere is another host (a CDN, a storage bucket): it records the
// headers of every request it gets and serves the provider's lookup from the
// provider's store with its own access, as a CDN in front of an API does.
type elsewhere struct {
	p        *provider
	mu       sync.Mutex
	requests []http.Header
}

func (e *elsewhere) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.requests = append(e.requests, r.Header.Clone())
	e.mu.Unlock()
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer s3cr3t-token")
	r.Header.Set("X-Client", "agentsaga")
	e.p.ServeHTTP(w, r)
}

func (e *elsewhere) seen() []http.Header {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]http.Header(nil), e.requests...)
}

// redirecting is the provider behind an origin that answers every request
// with a redirect to another host: a write after it committed (302), a
// lookup before reading (307).
func redirecting(p *provider, other string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			p.ServeHTTP(httptest.NewRecorder(), r) // the provider acts
			w.Header().Set("Location", other+"/receipts/1")
			w.WriteHeader(http.StatusFound)
			return
		}
		w.Header().Set("Location", other+r.URL.RequestURI())
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
}

// A provider that redirects to another host (two servers, two ports): the
// other host never receives the system's credentials, the write answered
// 302 is UNKNOWN (never followed), and the engine's next attempt reconciles
// it through the lookup, which follows its redirect without credentials.
// The provider holds one charge.
func TestRedirectCarriesNoCredentialsAndAWriteIsUnknown(t *testing.T) {
	p := &provider{t: t, charges: map[string]map[string]any{}, refunds: map[string]map[string]any{}}
	other := &elsewhere{p: p}
	osrv := httptest.NewServer(other)
	t.Cleanup(osrv.Close)
	srv := httptest.NewServer(redirecting(p, osrv.URL))
	t.Cleanup(srv.Close)
	reg := loadProvider(t, srv.URL)

	const key = "s1:1:1:charge"
	_, err := call(t, reg, "charge", key, chargeArgs, 1)
	if tool.KindOf(err) != tool.KindUnknown || tool.CodeOf(err) != "redirected" {
		t.Fatalf("a write answered 302: kind %s code %q (%v), want unknown redirected", tool.KindOf(err), tool.CodeOf(err), err)
	}
	if n := len(other.seen()); n != 0 {
		t.Fatalf("the write's redirect was followed: the other host got %d requests", n)
	}

	st, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a := &activities.Activities{Tools: reg, Ledger: st}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	te := suite.NewTestActivityEnvironment()
	te.RegisterActivity(a)
	const key2 = "s1:2:1:charge"
	fp, err := plan.Fingerprint("charge", chargeArgs)
	if err != nil {
		t.Fatal(err)
	}
	req := activities.Request{Key: key2, Tool: "charge", Args: chargeArgs, Fingerprint: fp}
	execute := func() (activities.Output, error) {
		v, err := te.ExecuteActivity(a.ExecuteTool, req)
		if err != nil {
			return activities.Output{}, err
		}
		var out activities.Output
		if err := v.Get(&out); err != nil {
			t.Fatal(err)
		}
		return out, nil
	}
	_, err = execute()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrUnknown {
		t.Fatalf("a write answered 302 through the engine: %v; want an %s failure", err, activities.ErrUnknown)
	}
	if op, err := st.Get(context.Background(), key2); err != nil || op.Status != ledger.Unknown {
		t.Fatalf("ledger row after the redirect: %+v, %v; want unknown", op, err)
	}
	out, err := execute()
	if err != nil || !out.Reconciled || out.ExternalID != "ch_2" {
		t.Fatalf("the next attempt: %+v, %v; want reconciled as ch_2", out, err)
	}

	charges, _, keys := p.state()
	if charges != 2 || len(keys) != 2 {
		t.Errorf("the provider holds %d charges from %d writes, want 2 and 2 (one per key, none resent)", charges, len(keys))
	}
	seen := other.seen()
	if len(seen) == 0 {
		t.Fatal("the lookup's redirect was not followed: the test proves nothing about its headers")
	}
	for i, h := range seen {
		if ref := h.Get("Referer"); ref != "" {
			t.Errorf("request %d at the other host names the URL it came from: %q", i, ref)
		}
		for name, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, "s3cr3t") || strings.EqualFold(name, "X-Client") || strings.EqualFold(name, "Authorization") {
					t.Errorf("request %d at the other host carried the system's header %s: %q", i, name, v)
				}
			}
		}
	}
}
