package plan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// ErrTooLarge is wrapped by ReadLimited's error for input over its limit.
var ErrTooLarge = errors.New("input over the size limit")

// ReadLimited reads r to its end, but at most limit+1 bytes: input longer
// than limit bytes is refused with an error that wraps ErrTooLarge and names
// the limit (so `--plan /dev/zero` ends at once). It returns when ctx is
// done even while r blocks (a fifo nobody writes, a terminal): the read runs
// in its own goroutine, and an *os.File that supports deadlines (pipes,
// fifos) gets a read deadline of now so that goroutine ends too; a reader
// that cannot be interrupted is left blocked (the caller is about to exit).
func ReadLimited(ctx context.Context, r io.Reader, limit int) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("read: limit %d is negative: pass the largest input accepted", limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read cancelled before it started: %w", context.Cause(ctx))
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
		done <- result{data, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, fmt.Errorf("read: %w", res.err)
		}
		if len(res.data) > limit {
			return nil, fmt.Errorf("read: more than %d bytes, the limit is %d bytes: %w", limit, limit, ErrTooLarge)
		}
		return res.data, nil
	case <-ctx.Done():
		if f, ok := r.(*os.File); ok {
			_ = f.SetReadDeadline(time.Now()) // unblocks the read where supported
		}
		return nil, fmt.Errorf("read cancelled: %w", context.Cause(ctx))
	}
}

// ReadFile opens path and reads it with ReadLimited. Opening a fifo blocks
// until a writer comes; ReadFile returns when ctx is done during the open
// too (the open is left to finish on its own and its file is closed).
func ReadFile(ctx context.Context, path string, limit int) ([]byte, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		ch <- opened{f, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			return nil, fmt.Errorf("open %s: %w", path, o.err)
		}
		defer o.f.Close()
		data, err := ReadLimited(ctx, o.f, limit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return data, nil
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, fmt.Errorf("open %s cancelled (no writer came to the fifo?): %w", path, context.Cause(ctx))
	}
}
