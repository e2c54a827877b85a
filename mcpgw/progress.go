package mcpgw

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/workflows"
)

// personPoll is how often a call kept open for a person reads its turn
// again (the turn's Update is answered from its record, then queried).
var personPoll = time.Second

// progressKey is the context key of a call's *progress.
type progressKey struct{}

// progress is what a call whose request carries a progressToken tells its
// client: a message that says what the call is doing now.
type progress struct {
	// client is the call's context before PersonWait bounds it: done
	// when the client has gone (cancelled, disconnected).
	client  context.Context
	mu      sync.Mutex
	msg     string
	changed chan struct{} // a new message: notify at once
}

func (p *progress) set(msg string) {
	p.mu.Lock()
	same := p.msg == msg
	p.msg = msg
	p.mu.Unlock()
	if !same {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

func (p *progress) get() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msg
}

// progressOf returns the progress of a call made with a progressToken, or
// nil.
func progressOf(ctx context.Context) *progress {
	p, _ := ctx.Value(progressKey{}).(*progress)
	return p
}

// progress starts telling the client of a call made with a progressToken
// what the call does, every ProgressInterval and at once when that
// changes, and bounds the call by PersonWait. stop ends the notifications
// (before the result is sent: none follows it).
func (g *gateway) progress(ctx context.Context, ss *mcp.ServerSession, token any) (context.Context, func()) {
	p := &progress{client: ctx, msg: "the call is running", changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, progressKey{}, p), g.o.PersonWait)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(g.o.ProgressInterval)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-p.changed:
			}
			err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: p.get()})
			if err != nil && ctx.Err() == nil {
				g.log.Debug("mcp: progress notification not sent", "error", err)
			}
		}
	}()
	return ctx, func() { cancel(); <-done }
}

// sessionLock is a call's hold on its session's queue, which it lets go
// while it waits for a person (the session's other calls are answered
// meanwhile: the session refuses new turns naming the open question).
type sessionLock struct {
	st   *sessionState
	held bool
}

func (l *sessionLock) unlock() {
	if l.held {
		<-l.st.lock
		l.held = false
	}
}

// await keeps a call whose client asked for progress open while its turn
// waits for a person (or runs after their decision): it reads the turn
// every personPoll, out of the session's queue, until the turn has a final
// state or PersonWait has passed, and returns its latest state. Calls
// without progress, and turns not waiting, are returned as they are. ok is
// false when the client went away meanwhile (the call's queue is not taken
// again: the result is given to no one).
func (g *gateway) await(ctx context.Context, lk *sessionLock, session string, turn int, key string, step plan.Step, res workflows.TurnResult) (_ workflows.TurnResult, ok bool) {
	p := progressOf(ctx)
	if p == nil || res.State != workflows.TurnWaiting {
		return res, true
	}
	lk.unlock()
	t := workflows.TurnRequest{Turn: turn, RequestID: key, Steps: []plan.Step{step}}
	for res.State == workflows.TurnWaiting || res.State == workflows.TurnRunning {
		p.set(waitingProgress(res, turn, g.o.PersonWait))
		select {
		case <-ctx.Done():
		case <-time.After(personPoll):
		}
		if ctx.Err() != nil {
			break
		}
		r, err := g.plans.Turn(ctx, session, t, g.o.Session)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			g.log.Warn("mcp: a call kept open for a person could not read its turn; it reads again", "session", session, "turn", redact.Counter(turn), "error", redact.Identifier{Text: err.Error(), Counters: []int64{int64(turn)}})
			continue
		}
		res = r
	}
	if lk.st == nil {
		return res, p.client.Err() == nil // a call out of any session's queue
	}
	select {
	case lk.st.lock <- struct{}{}:
		lk.held = true
		return res, true
	case <-p.client.Done():
		return res, false
	}
}

// waitingProgress words a progress notification of a call kept open.
func waitingProgress(res workflows.TurnResult, turn int, bound time.Duration) string {
	if q := res.Question; res.State == workflows.TurnWaiting && q != nil {
		return fmt.Sprintf("waiting for a person to answer question %s (%s) of turn %d; this call stays open until they decide, at most %s", q.ID, q.Kind, turn, bound)
	}
	if res.State == workflows.TurnWaiting {
		return fmt.Sprintf("waiting for a person on turn %d; this call stays open until they decide, at most %s", turn, bound)
	}
	return fmt.Sprintf("a person decided; turn %d is running", turn)
}
