package codec_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/codec"
)

const (
	testToken = "tok_0123456789abcdef_codec"
	uiOrigin  = "http://127.0.0.1:8233"
)

func newServer(t *testing.T) (*httptest.Server, converter.DataConverter) {
	t.Helper()
	k := ring(t, "k1", map[string][]byte{"k1": key(7)})
	s, err := codec.NewServer(k, testToken, []string{uiOrigin})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return hs, codec.NewDataConverter(k)
}

// encryptedBody returns a /decode request body holding one encrypted
// payload of v.
func encryptedBody(t *testing.T, dc converter.DataConverter, v any) []byte {
	t.Helper()
	p, err := dc.ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(commonpb.Payloads{Payloads: []*commonpb.Payload{p}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t *testing.T, url string, body []byte, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

// The codec endpoint decodes for a holder of the token, for nobody else.
func TestServerDecodesWithTokenOnly(t *testing.T) {
	hs, dc := newServer(t)
	body := encryptedBody(t, dc, "ord_SRV_4471 refund note")
	jsonCT := map[string]string{"Content-Type": "application/json"}

	resp, out := post(t, hs.URL+"/decode", body, jsonCT)
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(out, "ord_SRV") {
		t.Errorf("no token: %d %s; want 401 and no plaintext", resp.StatusCode, out)
	}
	resp, _ = post(t, hs.URL+"/decode", body, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testToken + "x"})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", resp.StatusCode)
	}
	auth := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testToken}
	resp, out = post(t, hs.URL+"/decode", body, auth)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with token: %d %s", resp.StatusCode, out)
	}
	var got commonpb.Payloads
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Payloads) != 1 {
		t.Fatalf("answer %s: %v", out, err)
	}
	if enc := string(got.Payloads[0].Metadata[converter.MetadataEncoding]); enc != converter.MetadataEncodingJSON {
		t.Errorf("decoded encoding %q, want json/plain", enc)
	}
	if !strings.Contains(string(got.Payloads[0].Data), "ord_SRV_4471 refund note") {
		t.Errorf("decoded data %q", got.Payloads[0].Data)
	}

	// /encode gives back what /decode reads.
	plain, _ := json.Marshal(commonpb.Payloads{Payloads: got.Payloads})
	resp, out = post(t, hs.URL+"/encode", plain, auth)
	if resp.StatusCode != http.StatusOK || strings.Contains(out, "ord_SRV") || !strings.Contains(out, "YmluYXJ5L2VuY3J5cHRlZA==") { // base64 of binary/encrypted
		t.Errorf("encode: %d %s", resp.StatusCode, out)
	}

	// text/plain (what a cross-site form can send) is refused.
	resp, _ = post(t, hs.URL+"/decode", body, map[string]string{"Content-Type": "text/plain", "Authorization": "Bearer " + testToken})
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d, want 415", resp.StatusCode)
	}
	// A body over the limit is refused.
	big := append([]byte(`{"payloads":[{"data":"`), bytes.Repeat([]byte("A"), codec.MaxBodyBytes)...)
	big = append(big, []byte(`"}]}`)...)
	resp, _ = post(t, hs.URL+"/decode", big, auth)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("oversized body: %d, want 400", resp.StatusCode)
	}
	// Garbage gets a 400, not a crash.
	resp, _ = post(t, hs.URL+"/decode", []byte(`{"payloads":[{"metadata":{"encoding":"YmluYXJ5L2VuY3J5cHRlZA=="},"data":"AAAA"}]}`), auth)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("garbage payload: %d, want 400", resp.StatusCode)
	}
}

// The UI's origin gets its preflight and CORS headers; other origins get 403.
func TestServerCORS(t *testing.T) {
	hs, dc := newServer(t)
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, hs.URL+"/decode", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type,x-namespace,authorization")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, o := range []string{uiOrigin, "http://localhost:8233"} {
		resp := preflight(o)
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != o ||
			resp.Header.Get("Access-Control-Allow-Credentials") != "true" {
			t.Errorf("preflight from %s: %d %v", o, resp.StatusCode, resp.Header)
		}
		allowed := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers"))
		for _, h := range []string{"content-type", "x-namespace", "authorization"} {
			if !strings.Contains(allowed, h) {
				t.Errorf("preflight from %s does not allow header %s: %q", o, h, allowed)
			}
		}
	}
	for _, o := range []string{"http://evil.example", "http://127.0.0.1:9999", "null"} {
		resp := preflight(o)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight from %s: %d %v; want 403 without CORS headers", o, resp.StatusCode, resp.Header)
		}
	}
	// A request from a foreign origin is refused even with the token.
	body := encryptedBody(t, dc, "x")
	resp, _ := post(t, hs.URL+"/decode", body, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testToken, "Origin": "http://evil.example"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign origin with token: %d, want 403", resp.StatusCode)
	}
	resp, _ = post(t, hs.URL+"/decode", body, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testToken, "Origin": uiOrigin, "X-Namespace": "default"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != uiOrigin {
		t.Errorf("UI origin with token: %d %v", resp.StatusCode, resp.Header)
	}
}

// /login hands a browser a cookie (not the token) that the UI sends along.
func TestServerLoginCookie(t *testing.T) {
	hs, dc := newServer(t)
	form := func(token, origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := form("wrong-token-0000000000", hs.URL); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if resp := form(testToken, "http://evil.example"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("login posted from another origin: %d, want 403", resp.StatusCode)
	}
	resp := form(testToken, hs.URL)
	if resp.StatusCode != http.StatusOK || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	c := resp.Cookies()[0]
	if c.Value == testToken || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie %+v: want an HttpOnly SameSite=Strict cookie that is not the token", c)
	}
	// The login outlives the browser session (a persistent cookie).
	if c.MaxAge != int(codec.SessionMaxAge/time.Second) {
		t.Errorf("cookie Max-Age %d, want %d: the login must last beyond the browser session", c.MaxAge, int(codec.SessionMaxAge/time.Second))
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/decode", bytes.NewReader(encryptedBody(t, dc, "x")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", uiOrigin)
	req.AddCookie(c)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusOK {
		t.Errorf("decode with the cookie: %d", r2.StatusCode)
	}
}

func TestNewServerRefusesWeakSetups(t *testing.T) {
	k := ring(t, "k1", map[string][]byte{"k1": key(7)})
	if _, err := codec.NewServer(k, "short", nil); err == nil {
		t.Error("a 5-character token was accepted")
	}
	if _, err := codec.NewServer(nil, testToken, nil); err == nil {
		t.Error("a server without keyring was accepted")
	}
}
