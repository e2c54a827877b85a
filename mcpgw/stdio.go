package mcpgw

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxStdioLine bounds one JSON-RPC message (one line) on stdio, in bytes.
const MaxStdioLine = 4 << 20

// JSON-RPC error codes the stdio transport answers with.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// NewStdioTransport returns the transport to serve the gateway over a
// client's stdin (r) and stdout (w), one JSON-RPC message per line. A line
// that is not JSON is answered with a JSON-RPC parse error (-32700), one
// that is JSON but not a JSON-RPC message with invalid request (-32600),
// one longer than MaxStdioLine with a parse error naming the limit; each
// is dropped and the gateway goes on serving the next line (the SDK's own
// transport would end the connection). Closing the transport does not
// close w.
func NewStdioTransport(r io.Reader, w io.Writer) mcp.Transport {
	out := &lockedWriter{w: w}
	pr, pw := io.Pipe()
	go filterLines(r, pw, out)
	return &mcp.IOTransport{Reader: pr, Writer: out}
}

// lockedWriter serialises the SDK's messages and the filter's answers: one
// Write is one whole line.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }

// filterLines copies the well-formed lines of r to pw and answers the
// others on out, until r ends.
func filterLines(r io.Reader, pw *io.PipeWriter, out io.Writer) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, tooLong, err := readLine(br)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			if problem, code := checkLine(line, tooLong); problem != "" {
				answerError(out, idOf(line), code, problem)
			} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
				_ = pw.CloseWithError(werr)
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			_ = pw.CloseWithError(err)
			return
		}
	}
}

// readLine reads one line without its newline; a line longer than
// MaxStdioLine is read to its end and reported tooLong (its bytes dropped).
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > MaxStdioLine+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), tooLong, err
	}
}

// checkLine says what is wrong with a line, with its JSON-RPC error code,
// or "".
func checkLine(line []byte, tooLong bool) (string, int) {
	if tooLong {
		return fmt.Sprintf("Parse error: the line is longer than %d bytes (MaxStdioLine); send one JSON-RPC message per line, within it", MaxStdioLine), codeParseError
	}
	if !json.Valid(line) {
		return "Parse error: the line is not JSON; send one JSON-RPC message per line", codeParseError
	}
	var batch []json.RawMessage
	if json.Unmarshal(line, &batch) == nil {
		if len(batch) == 0 {
			return "Invalid Request: an empty batch", codeInvalidRequest
		}
		for _, m := range batch {
			if _, err := jsonrpc.DecodeMessage(m); err != nil {
				return "Invalid Request: a message of the batch is not JSON-RPC 2.0: " + err.Error(), codeInvalidRequest
			}
		}
		return "", 0
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return "Invalid Request: the line is JSON but not a JSON-RPC 2.0 message: " + err.Error(), codeInvalidRequest
	}
	return "", 0
}

// idOf returns the id of a JSON-RPC request line when it can be read, else
// null.
func idOf(line []byte) json.RawMessage {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &m) == nil && len(m.ID) > 0 && (m.ID[0] == '"' || (m.ID[0] >= '0' && m.ID[0] <= '9') || m.ID[0] == '-') {
		return m.ID
	}
	return json.RawMessage("null")
}

// answerError writes a JSON-RPC error response.
func answerError(out io.Writer, id json.RawMessage, code int, msg string) {
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg}})
	if err != nil {
		return
	}
	_, _ = out.Write(append(b, '\n'))
}
