package sandbox

import (
	"encoding/json"
	"io"
	"net/http"
	"sort"
)

func (s *Sandbox) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/providers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.URLs())
	})
	mux.HandleFunc("GET /admin/ops", func(w http.ResponseWriter, r *http.Request) {
		names := make([]string, 0, len(Ops))
		for n := range Ops {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]OpInfo, 0, len(names))
		for _, n := range names {
			out = append(out, OpInfo{Op: n, Kind: Ops[n]})
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		var f FaultSpec
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&f); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_fault", "the body must be a fault such as {\"op\":\"refunds.create\",\"fault\":\"commit_then_drop\",\"count\":1}: "+err.Error())
			return
		}
		if err := f.Validate(); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_fault", err.Error())
			return
		}
		s.faults.add(f)
		s.log.Info("sandbox fault added", "op", f.Op, "fault", f.Fault, "count", f.Count)
		writeJSON(w, http.StatusCreated, s.faults.list())
	})
	mux.HandleFunc("GET /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.faults.list())
	})
	mux.HandleFunc("DELETE /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		s.faults.clear()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /admin/calls", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.faults.counts(r.URL.Query()["op"]))
	})
	mux.HandleFunc("GET /admin/effects", func(w http.ResponseWriter, r *http.Request) {
		e, err := s.effects(r.Context(), r.URL.Query().Get("provider"))
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, e)
	})
	mux.HandleFunc("PUT /admin/crm/index-lag", func(w http.ResponseWriter, r *http.Request) {
		var l IndexLag
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&l); err != nil || l.Searches < 0 || l.Duration < 0 {
			writeError(w, http.StatusBadRequest, "invalid_request", "the body must be {\"searches\":N,\"duration\":\"2s\"} with no negative value")
			return
		}
		s.crm.setLag(l)
		writeJSON(w, http.StatusOK, l)
	})
	mux.HandleFunc("POST /admin/reset", func(w http.ResponseWriter, r *http.Request) {
		s.faults.reset()
		s.crm.setLag(s.opts.IndexLag)
		w.WriteHeader(http.StatusNoContent)
	})
}

// OpInfo describes one operation faults can target.
type OpInfo struct {
	Op   string `json:"op"`
	Kind OpKind `json:"kind"`
}
