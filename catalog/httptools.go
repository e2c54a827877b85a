package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

type request struct {
	method    string
	path      template
	query     map[string]template
	headers   map[string]template
	keyHeader string
	keyBody   string
	form      bool
	body      map[string]template
	arrays    map[string]bool // body nodes that are arrays (see bodyShape)
}

type response struct {
	externalID string
	keep       map[string]string
	rejectIf   *rejectIfDecl
}

type errorRules struct {
	code  string
	rules []rule
}

type rule struct {
	status []int
	codes  []string
	kind   tool.Kind
}

type lookup struct {
	req             request
	foundStatus     []int
	item            string
	externalID      string
	absentStatus    []int
	authoritative   bool
	authoritativeIf string
	lag             time.Duration
}

var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

func (b *builder) request(path string, d requestDecl, sc refScope, write, keyed bool) request {
	p := b.p
	r := request{method: strings.ToUpper(d.Method), query: map[string]template{}, headers: map[string]template{}, body: map[string]template{}}
	if r.method == "" {
		r.method = http.MethodGet
		if d.Body != nil {
			r.method = http.MethodPost
		}
	}
	if !slices.Contains(methods, r.method) {
		p.add(path+".method", "%q is not a method: use GET, POST, PUT, PATCH or DELETE", clip(d.Method, 20))
	}
	if !strings.HasPrefix(d.Path, "/") {
		p.add(path+".path", "is missing or does not start with '/': write the path below the system's base URL, such as /v1/refunds")
	} else if strings.ContainsAny(d.Path, "?#") {
		p.add(path+".path", "must not hold '?' or '#': declare query parameters under query")
	}
	r.path = b.template(path+".path", d.Path, sc, true)
	for _, k := range sortedKeys(d.Query) {
		r.query[k] = b.template(path+".query."+pathKey(k), d.Query[k], sc, false)
	}
	if len(d.Headers) > MaxHeaders {
		p.add(path+".headers", "declares %d headers, the limit is %d", len(d.Headers), MaxHeaders)
	}
	for _, k := range sortedKeys(d.Headers) {
		if !headerRE.MatchString(k) {
			p.add(path+".headers."+pathKey(k), "is not a header name")
			continue
		}
		t := b.template(path+".headers."+pathKey(k), d.Headers[k], sc, false)
		if len(t.refs()) == 0 && secretHeader(k) {
			p.add(path+".headers."+pathKey(k), "carries a credential: declare it on the system with from_env or from_file")
		}
		r.headers[http.CanonicalHeaderKey(k)] = t
	}
	if bd := d.Body; bd != nil {
		switch bd.Format {
		case "", "json":
		case "form":
			r.form = true
		default:
			p.add(path+".body.format", "%q is not a format: use json or form", clip(bd.Format, 20))
		}
		if r.method == http.MethodGet {
			p.add(path+".body", "a GET sends no body: use the query or another method")
		}
		for _, k := range sortedKeys(bd.Fields) {
			r.body[k] = b.template(path+".body.fields."+pathKey(k), bd.Fields[k], sc, false)
		}
		keyBody := ""
		if d.Key != nil {
			keyBody = d.Key.BodyField
		}
		r.arrays = b.bodyShape(path+".body.fields", bd.Fields, r.form, keyBody)
	}
	if k := d.Key; k != nil {
		if k.Header != "" {
			if !headerRE.MatchString(k.Header) {
				p.add(path+".key.header", "%q is not a header name", clip(k.Header, 40))
			}
			r.keyHeader = http.CanonicalHeaderKey(k.Header)
		}
		if k.BodyField != "" {
			if d.Body == nil {
				p.add(path+".key.body_field", "the request has no body: declare body, or send the key in a header")
			} else if _, clash := d.Body.Fields[k.BodyField]; clash {
				p.add(path+".key.body_field", "%q is also a body field: remove one", clip(k.BodyField, 40))
			}
			r.keyBody = k.BodyField
		}
		if k.Header == "" && k.BodyField == "" {
			p.add(path+".key", "set header or body_field")
		}
	}
	if write && keyed && r.keyHeader == "" && r.keyBody == "" && !r.usesKey() {
		p.add(path+".key", "a write must send its operation key: set key.header (such as Idempotency-Key), key.body_field, or use {key} in a template")
	}
	return r
}

func (r request) usesKey() bool {
	if sendsKey(r.path) {
		return true
	}
	for _, m := range []map[string]template{r.query, r.headers, r.body} {
		for _, t := range m {
			if sendsKey(t) {
				return true
			}
		}
	}
	return false
}

func (b *builder) response(path string, d responseDecl, write bool) response {
	p := b.p
	r := response{externalID: d.ExternalID, keep: d.Keep, rejectIf: d.RejectIf}
	if !validPointer(d.ExternalID) {
		p.add(path+".external_id", "%q is not a JSON pointer (RFC 6901), such as /id", clip(d.ExternalID, 40))
	}
	if write && d.ExternalID == "" {
		p.add(path+".external_id", "is missing: a write names the JSON pointer of the provider's id of the effect, such as /id")
	}
	for _, k := range sortedKeys(d.Keep) {
		if !validName(k) {
			p.add(path+".keep."+pathKey(k), "is not a name")
		}
		if !validPointer(d.Keep[k]) {
			p.add(path+".keep."+pathKey(k), "%q is not a JSON pointer (RFC 6901)", clip(d.Keep[k], 40))
		}
	}
	if ri := d.RejectIf; ri != nil {
		if ri.Pointer == "" || !validPointer(ri.Pointer) {
			p.add(path+".reject_if.pointer", "is not a JSON pointer (RFC 6901) into the answer")
		}
		if ri.Code != "" && !validPointer(ri.Code) {
			p.add(path+".reject_if.code", "is not a JSON pointer (RFC 6901)")
		}
	}
	return r
}

// final reports whether an outcome ends a call for good (no retry, no
// lookup).
func final(k tool.Kind) bool { return k == tool.KindRejected || k == tool.KindConflict }

// errorRules reads a tool's error rules. For a write, a rule may make final
// (rejected, conflict) only a 4xx other than 408 that it names: a 5xx or a
// timeout may come after the provider acted, and a 3xx to a write is
// UNKNOWN (httptool), so the engine must look it up, never give up on it.
func (b *builder) errorRules(path string, d *errorsDecl, write bool) errorRules {
	e := errorRules{code: "/error/code"}
	if d == nil {
		return e
	}
	if d.Code != "" {
		if !validPointer(d.Code) {
			b.p.add(path+".code", "%q is not a JSON pointer (RFC 6901), such as /error/code", clip(d.Code, 40))
		}
		e.code = d.Code
	}
	if len(d.Rules) > MaxRules {
		b.p.add(path+".rules", "declares %d rules, the limit is %d", len(d.Rules), MaxRules)
	}
	for i, r := range d.Rules {
		rp := fmt.Sprintf("%s.rules[%d]", path, i)
		k, ok := outcomes[r.Outcome]
		if !ok {
			b.p.add(rp+".outcome", "%q is not an outcome: use rejected, conflict, throttled, unavailable or in_flight", clip(r.Outcome, 40))
		}
		if len(r.Status) == 0 && len(r.Codes) == 0 {
			b.p.add(rp, "name the statuses, the codes or both that the rule matches")
		} else if ok && write && final(k) && len(r.Status) == 0 {
			b.p.add(rp+".status", "is missing: a codes-only rule matches every status, a 5xx or a timeout too, and outcome %s would make a write that may have happened final without a lookup; name the 4xx statuses it covers, such as [400, 422]", r.Outcome)
		}
		for j, s := range r.Status {
			sp := fmt.Sprintf("%s.status[%d]", rp, j)
			switch {
			case s >= 300 && s <= 399:
				b.p.add(sp, "%d is a redirect, not an error status (400 to 599): a write answered 3xx is UNKNOWN and looked up, a read's redirect is followed", s)
			case s < 400 || s > 599:
				b.p.add(sp, "%d is not an error status (400 to 599)", s)
			case ok && write && final(k) && s >= 500:
				b.p.add(sp, "%d with outcome %s would make a write's 5xx final: the provider may have acted before it failed, so a 5xx must stay unknown or retryable (use unavailable) and be looked up", s, r.Outcome)
			case ok && write && final(k) && s == http.StatusRequestTimeout:
				b.p.add(sp, "408 with outcome %s would make a write's timeout final: the provider may have acted, so a timeout must stay unknown or retryable (use unavailable) and be looked up", r.Outcome)
			}
		}
		e.rules = append(e.rules, rule{status: r.Status, codes: r.Codes, kind: k})
	}
	return e
}

func (b *builder) lookup(path string, d lookupDecl) *lookup {
	p := b.p
	l := &lookup{foundStatus: d.Found.Status, item: d.Found.Item, externalID: d.Found.ExternalID,
		absentStatus: d.Absent.Status, authoritative: d.Absent.Authoritative, authoritativeIf: d.Absent.AuthoritativeIf}
	// A lookup's templates may use the key and, for a reversal, nothing of
	// its args: the registry asks with the key alone.
	l.req = b.request(path+".request", d.Request, refScope{}, false, false)
	if l.req.method != http.MethodGet {
		p.add(path+".request.method", "a lookup reads: use GET")
	}
	if !l.req.usesKey() {
		p.add(path+".request", "a lookup must ask by key: use {key} in its path or query")
	}
	if len(l.foundStatus) == 0 {
		l.foundStatus = []int{http.StatusOK}
	}
	for i, s := range l.foundStatus {
		if s < 200 || s > 299 {
			p.add(fmt.Sprintf("%s.found.status[%d]", path, i), "%d is not a 2xx status", s)
		}
	}
	if !validPointer(l.item) {
		p.add(path+".found.item", "is not a JSON pointer (RFC 6901), such as /tickets/0")
	}
	if l.externalID == "" {
		l.externalID = "/id"
	}
	if !validPointer(l.externalID) {
		p.add(path+".found.external_id", "is not a JSON pointer (RFC 6901)")
	}
	for i, s := range l.absentStatus {
		if s < 400 || s > 499 {
			p.add(fmt.Sprintf("%s.absent.status[%d]", path, i), "%d is not a 4xx status", s)
		}
	}
	if len(l.absentStatus) == 0 && l.item == "" {
		p.add(path+".absent", "say how the provider answers an absent effect: status (such as [404]) or found.item pointing into a list")
	}
	if l.authoritativeIf != "" && !validPointer(l.authoritativeIf) {
		p.add(path+".absent.authoritative_if", "is not a JSON pointer (RFC 6901)")
	}
	l.lag = duration(p, path+".lag", d.Lag, false)
	if l.lag > MaxSettle {
		p.add(path+".lag", "%s is longer than the limit %s: a lookup that lags this long cannot settle a step; declare no_lookup", l.lag, MaxSettle)
	}
	return l
}

// httpTool is one tool of the catalogue.
type httpTool struct {
	spec     tool.Spec
	sys      *system
	req      request
	resp     response
	errs     errorRules
	lookup   *lookup
	enums    []enumArg
	reverses string
	original *httpTool
}

// reconcilingTool is an httpTool with a lookup.
type reconcilingTool struct{ *httpTool }

// Reconcile implements tool.Reconciler.
func (t *reconcilingTool) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return t.reconcile(ctx, key)
}

// Spec implements tool.Tool.
func (t *httpTool) Spec() tool.Spec { return t.spec }

func (t *httpTool) client() *httptool.Client {
	c := httptool.New(t.sys.baseURL, t.sys.client)
	c.Timeout = t.spec.Timeout
	return c
}

// Execute implements tool.Tool: one request, with the key where the
// catalogue puts it.
func (t *httpTool) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	args, err := tool.DecodeObject(call.Args)
	if err != nil {
		return tool.Result{}, tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("%s: args %w", t.spec.Name, err))
	}
	for _, e := range t.enums {
		if v, ok := args[e.name]; ok {
			s, _ := v.(string)
			if !slices.Contains(e.values, s) {
				return tool.Result{}, tool.Fail(tool.KindRejected, "invalid_args",
					fmt.Errorf("%s: argument %s must be one of %s", t.spec.Name, e.name, strings.Join(e.values, ", ")))
			}
		}
	}
	en := &env{args: args, key: call.Key}
	if t.spec.Reversal {
		var rev tool.Reversal
		if err := json.Unmarshal(call.Args, &rev); err != nil {
			return tool.Result{}, tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("%s: args must be a tool.Reversal: %w", t.spec.Name, err))
		}
		en.rev = &rev
		en.origArgs, _ = tool.DecodeObject(rev.OriginalArgs)
		if rev.OriginalExternalID == "" && t.usesRef("original.external_id") {
			id, err := t.findOriginal(ctx, rev.OriginalKey)
			if err != nil {
				return tool.Result{}, err
			}
			rev.OriginalExternalID = id
		}
	}
	raw, err := t.send(ctx, t.req, en, call.Key, t.spec.Class.IsWrite())
	if err != nil {
		return tool.Result{}, err
	}
	return t.result(raw)
}

func (t *httpTool) usesRef(ref string) bool {
	all := []template{t.req.path}
	for _, m := range []map[string]template{t.req.query, t.req.headers, t.req.body} {
		for _, v := range m {
			all = append(all, v)
		}
	}
	for _, tp := range all {
		if slices.Contains(tp.refs(), ref) {
			return true
		}
	}
	return false
}

// findOriginal learns the id of the effect a reversal undoes from the
// original tool's lookup.
func (t *httpTool) findOriginal(ctx context.Context, key string) (string, error) {
	if t.original == nil || t.original.lookup == nil || key == "" {
		return "", tool.Fail(tool.KindRejected, "original_unknown",
			fmt.Errorf("%s: the reversal names no original_external_id and the original cannot be looked up: a human must reverse it", t.spec.Name))
	}
	l, err := t.original.reconcile(ctx, key)
	switch {
	case l.Status == tool.Found:
		return l.Result.ExternalID, nil
	case l.Status == tool.Absent && l.Authoritative:
		return "", tool.Fail(tool.KindRejected, "original_not_found",
			fmt.Errorf("%s: the provider has no effect under the original key, so there is nothing to reverse: a human must check", t.spec.Name))
	}
	return "", tool.Fail(tool.KindUnavailable, "original_lookup_failed",
		fmt.Errorf("%s: look up the original to reverse it: %v: retry later", t.spec.Name, err))
}

// exchange carries one request's extra wire settings to the transport and
// what the transport saw back.
type exchange struct {
	keyHeader   string
	key         string
	contentType string
	headers     http.Header

	mu         sync.Mutex
	status     int
	retryAfter string
}

type exchangeKey struct{}

// send sends r rendered in en. Failures are *tool.Error of the catalogue's
// mapping.
// A write never follows a redirect (httptool).
func (t *httpTool) send(ctx context.Context, r request, en *env, key string, write bool) (json.RawMessage, error) {
	hr, ex, err := t.build(r, en, key)
	if err != nil {
		return nil, err
	}
	hr.Write = write
	raw, err := t.client().Raw(context.WithValue(ctx, exchangeKey{}, ex), hr)
	if err != nil {
		return nil, t.remap(err, ex)
	}
	return raw, nil
}

func (t *httpTool) build(r request, en *env, key string) (httptool.Request, *exchange, error) {
	notBuilt := func(format string, a ...any) error {
		return tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf(t.spec.Name+": "+format, a...))
	}
	path, ok := en.render(r.path, pathEscape)
	if !ok {
		return httptool.Request{}, nil, notBuilt("the request path needs an argument the call leaves out")
	}
	for _, seg := range strings.Split(path, "/") {
		// The plan's validation refuses such an argument already
		// (tool.Field.PathSegment); this also holds for what it does not
		// see, such as a provider's id in a reversal's path.
		if tool.DotSegment(seg) {
			return httptool.Request{}, nil, notBuilt(`the request path would hold a dot segment ("." or "..", also percent-encoded), which leaves its segment at a provider that normalises paths: send the object's id itself`)
		}
	}
	q := url.Values{}
	for _, k := range sortedKeys(r.query) {
		if v, ok := en.render(r.query[k], nil); ok {
			q.Set(k, v)
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	ex := &exchange{headers: http.Header{}}
	for k, tp := range r.headers {
		if v, ok := en.render(tp, nil); ok {
			if strings.ContainsAny(v, "\r\n\x00") {
				return httptool.Request{}, nil, notBuilt("header %s would hold a line break", k)
			}
			ex.headers.Set(k, v)
		}
	}
	hr := httptool.Request{Method: r.method, Path: path}
	if r.keyHeader != "" {
		hr.Key, ex.keyHeader, ex.key = key, r.keyHeader, key
	}
	if len(r.body) > 0 || r.keyBody != "" {
		obj := map[string]any{}
		for k, tp := range r.body {
			if v, ok := en.jsonValue(tp); ok {
				putBody(obj, k, v)
			}
		}
		nestArrays(obj, r.arrays)
		if r.keyBody != "" {
			obj[r.keyBody] = key
		}
		var body []byte
		if r.form {
			f := url.Values{}
			for k, v := range obj {
				f.Set(k, text(v))
			}
			body = []byte(f.Encode())
			ex.contentType = "application/x-www-form-urlencoded"
		} else {
			var err error
			if body, err = json.Marshal(obj); err != nil {
				return httptool.Request{}, nil, notBuilt("encode the body: %v", err)
			}
		}
		hr.Body = json.RawMessage(body)
	}
	return hr, ex, nil
}

// remap applies the catalogue's error rules to a provider's answer other
// than 2xx; without a matching rule httptool's table stands.
func (t *httpTool) remap(err error, ex *exchange) error {
	var se *httptool.StatusError
	if !errors.As(err, &se) {
		return err
	}
	code := se.Code
	if t.errs.code != "/error/code" {
		code = ""
		if doc, derr := decodeAny(se.Body); derr == nil {
			if v, ok := resolve(doc, t.errs.code); ok {
				code = redact.String(text(v))
			}
		}
	}
	kind := tool.KindOf(err)
	matched := false
	for _, r := range t.errs.rules {
		if (len(r.status) == 0 || slices.Contains(r.status, se.Status)) && (len(r.codes) == 0 || slices.Contains(r.codes, code)) {
			kind, matched = r.kind, true
			break
		}
	}
	if !matched && code == se.Code {
		return err
	}
	if code == "" {
		code = fmt.Sprintf("http_%d", se.Status)
	}
	te := &tool.Error{Kind: kind, Code: code, Err: err}
	if kind == tool.KindThrottled || kind == tool.KindUnavailable {
		ex.mu.Lock()
		te.RetryAfter = httptool.RetryAfter(ex.retryAfter, time.Now())
		ex.mu.Unlock()
	}
	return te
}

func decodeAny(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// result reads a 2xx answer: reject_if, the external id and the kept fields.
func (t *httpTool) result(raw json.RawMessage) (tool.Result, error) {
	doc, err := decodeAny(raw)
	if err != nil && (t.spec.Class.IsWrite() || len(t.resp.keep) > 0 || t.resp.externalID != "" || t.resp.rejectIf != nil) {
		if t.spec.Class.IsWrite() {
			return tool.Result{}, tool.Fail(tool.KindUnknown, "bad_response",
				fmt.Errorf("%s: the provider answered 2xx with a body that is not JSON: reconcile by key to learn the result", t.spec.Name))
		}
		return tool.Result{}, tool.Fail(tool.KindUnavailable, "bad_response", fmt.Errorf("%s: the provider's answer is not JSON", t.spec.Name))
	}
	if ri := t.resp.rejectIf; ri != nil {
		if v, ok := resolve(doc, ri.Pointer); ok && text(v) == ri.Equals {
			code := "rejected"
			if ri.Code != "" {
				if c, ok := resolve(doc, ri.Code); ok && text(c) != "" {
					code = redact.String(text(c))
				}
			}
			return tool.Result{}, tool.Fail(tool.KindRejected, code, fmt.Errorf("%s: the provider refused (%s)", t.spec.Name, code))
		}
	}
	return t.pick(doc, t.resp.externalID)
}

// pick builds a Result from doc: the id at idPtr and the kept fields.
func (t *httpTool) pick(doc any, idPtr string) (tool.Result, error) {
	var res tool.Result
	if idPtr != "" {
		v, ok := resolve(doc, idPtr)
		res.ExternalID = text(v)
		if (!ok || res.ExternalID == "") && t.spec.Class.IsWrite() {
			return tool.Result{}, tool.Fail(tool.KindUnknown, "bad_response",
				fmt.Errorf("%s: the provider answered 2xx without an id at %s: reconcile by key to learn the result", t.spec.Name, idPtr))
		}
	}
	if len(t.resp.keep) > 0 {
		kept := map[string]any{}
		for name, ptr := range t.resp.keep {
			if v, ok := resolve(doc, ptr); ok {
				kept[name] = v
			}
		}
		res.Data, _ = json.Marshal(kept)
	}
	return res, nil
}

// text renders a decoded JSON scalar as text; nil is "".
func text(v any) string {
	s, _, _ := (&env{args: map[string]any{"v": v}}).value("v")
	return s
}

// reconcile runs the lookup for key.
func (t *httpTool) reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	l := t.lookup
	en := &env{args: map[string]any{}, key: key}
	hr, ex, err := t.build(l.req, en, key)
	if err != nil {
		return tool.Lookup{Status: tool.Unknown}, err
	}
	raw, err := t.client().Raw(context.WithValue(ctx, exchangeKey{}, ex), hr)
	if err != nil {
		st := httptool.StatusOf(err)
		if st != 0 && slices.Contains(l.absentStatus, st) {
			return tool.Lookup{Status: tool.Absent, Authoritative: l.authoritative}, nil
		}
		if st == http.StatusConflict {
			return tool.Lookup{Status: tool.Unknown}, nil
		}
		return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("%s lookup: %w", t.spec.Name, err)
	}
	ex.mu.Lock()
	status := ex.status
	ex.mu.Unlock()
	if !slices.Contains(l.foundStatus, status) {
		return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("%s lookup: the provider answered %d, which the catalogue does not declare as found", t.spec.Name, status)
	}
	doc, err := decodeAny(raw)
	if err != nil {
		return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("%s lookup: the answer is not JSON", t.spec.Name)
	}
	item, ok := resolve(doc, l.item)
	if !ok || item == nil {
		auth := l.authoritative
		if l.authoritativeIf != "" {
			v, _ := resolve(doc, l.authoritativeIf)
			auth = v == true
		}
		return tool.Lookup{Status: tool.Absent, Authoritative: auth}, nil
	}
	res, err := t.pick(item, l.externalID)
	if err != nil || res.ExternalID == "" {
		return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("%s lookup: the provider's answer has no id at %s", t.spec.Name, l.externalID)
	}
	return tool.Lookup{Status: tool.Found, Result: res, Authoritative: true}, nil
}

// transport adds a system's headers and a request's wire settings, and
// records the status and Retry-After. It never resends: httptool gives the
// request no GetBody. The system's headers (its credentials) and the
// request's own go only to the base URL's origin: a redirect to another
// host, port or scheme (a pre-signed storage URL, a CDN) gets none of them.
type transport struct {
	base    http.RoundTripper
	origin  string // the system's base URL
	headers http.Header
}

// RoundTrip implements http.RoundTripper.
func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Body, r.GetBody, r.ContentLength = req.Body, nil, req.ContentLength
	home := httptool.SameOrigin(tr.origin, r.URL)
	if home {
		for k, vs := range tr.headers {
			r.Header[k] = append([]string(nil), vs...)
		}
	} else {
		// The URL it came from (a lookup's query holds the key) is the
		// origin's business.
		r.Header.Del("Referer")
	}
	ex, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if ex != nil && home {
		if ex.keyHeader != "" && ex.keyHeader != httptool.KeyHeader {
			// httptool writes the key under the lower-case name.
			r.Header.Del(httptool.KeyHeader)
			delete(r.Header, strings.ToLower(httptool.KeyHeader))
			r.Header.Set(ex.keyHeader, ex.key)
		}
		if ex.contentType != "" {
			r.Header.Set("Content-Type", ex.contentType)
		}
		for k, vs := range ex.headers {
			r.Header[k] = vs
		}
	}
	if r.Method != http.MethodGet && (r.Body == nil || r.Body == http.NoBody) {
		// net/http resends on its own a bodiless request that carries an
		// Idempotency-Key (or X-Idempotency-Key) header when a reused
		// connection closes before the answer: a second send the saga never
		// sees, and a lost answer hidden. It looks for the header under its
		// canonical name only, so the header is written in lower case (HTTP
		// header names are case-insensitive) and the request stays sent at
		// most once.
		for _, h := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
			if v, ok := r.Header[h]; ok {
				delete(r.Header, h)
				r.Header[strings.ToLower(h)] = v
			}
		}
	}
	base := tr.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	if err == nil && ex != nil {
		ex.mu.Lock()
		ex.status, ex.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
		ex.mu.Unlock()
	}
	return resp, err
}
