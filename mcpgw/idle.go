package mcpgw

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/serviceerror"

	"github.com/agentsaga/agentsaga/workflows"
)

// SessionEnder ends an AgentSession; *sagaclient.Client is one. When the
// Plans given to New is a SessionEnder too, the gateway ends the
// AgentSession of an MCP session that has closed (see EndedBy).
type SessionEnder interface {
	EndSession(ctx context.Context, session, outcome, by string) (workflows.Status, error)
}

// EndedBy is who the gateway names when it ends the AgentSession of an
// MCP session that closed: an MCP session over streamable HTTP that sent
// no request for HandlerOptions.SessionIdle (DefaultSessionIdle, 30
// minutes) or was closed by its client (HTTP DELETE), or a stdio
// connection whose client closed it. The AgentSession ends "succeeded"
// (its writes are kept, nothing is reversed), unless a turn of it waits
// for a person: then it is left running for the person (end it with
// `starter end` later). Only the sessions the gateway made for MCP
// sessions ("mcp-..." ones) are ended: a session the client named with
// _meta MetaSession is the client's to end.
const EndedBy = "mcp-gateway"

// endTimeout bounds ending one AgentSession.
const endTimeout = 30 * time.Second

// servers maps each server made by New (weakly: a server no longer used is
// dropped) to its gateway, for Settle.
var servers sync.Map // weak.Pointer[mcp.Server] -> *gateway

// register notes g as the gateway of s.
func register(s *mcp.Server, g *gateway) {
	k := weak.Make(s)
	servers.Store(k, g)
	runtime.AddCleanup(s, func(k weak.Pointer[mcp.Server]) { servers.Delete(k) }, k)
}

// Settle waits until the gateway of s (made by New) has ended the
// AgentSessions of the MCP sessions that closed, or ctx ends. Call it after
// (*mcp.Server).Run returns over stdio, before the process exits.
func Settle(ctx context.Context, s *mcp.Server) error {
	v, ok := servers.Load(weak.Make(s))
	if !ok {
		return errors.New("mcpgw: Settle needs a server made by mcpgw.New")
	}
	done := make(chan struct{})
	go func() { v.(*gateway).ends.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch ends session, the AgentSession the gateway made for ss, once ss
// has closed. Called with g.mu held, once per ss.
func (g *gateway) watch(ss *mcp.ServerSession, session string) {
	if _, ok := g.plans.(SessionEnder); !ok || g.watched[ss] {
		return
	}
	g.watched[ss] = true
	g.ends.Add(1)
	go func() {
		defer g.ends.Done()
		_ = ss.Wait()
		g.mu.Lock()
		delete(g.watched, ss)
		g.mu.Unlock()
		g.end(session)
	}()
}

// end ends an AgentSession whose MCP session closed, unless it waits for a
// person or does not exist.
func (g *gateway) end(session string) {
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	wf := workflows.SessionWorkflowID(session)
	st, err := g.plans.Status(ctx, wf)
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return // no call reached the saga
	case err != nil:
		g.log.Warn("mcp: the MCP session closed; its AgentSession could not be read and is left running", "session", session, "error", err)
		return
	case len(st.Questions) > 0:
		g.log.Info("mcp: the MCP session closed; its AgentSession waits for a person and is left running", "session", session, "question", st.Questions[0].ID)
		return
	}
	if _, err := g.plans.(SessionEnder).EndSession(ctx, session, string(workflows.OutcomeSucceeded), EndedBy); err != nil {
		g.log.Warn("mcp: the MCP session closed; its AgentSession could not be ended", "session", session, "error", err)
		return
	}
	g.mu.Lock()
	delete(g.states, session)
	g.mu.Unlock()
	g.log.Info("mcp: the MCP session closed; its AgentSession ended", "session", session)
}
