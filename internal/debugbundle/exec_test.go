package debugbundle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

// frame encodes one server frame (unmasked unless mask is set).
func frame(op byte, fin bool, payload []byte, mask bool) []byte {
	b := []byte{op}
	if fin {
		b[0] |= 0x80
	}
	var m byte
	if mask {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = append(b, m|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if mask {
		key := []byte{1, 2, 3, 4}
		b = append(b, key...)
		masked := make([]byte, len(payload))
		for i := range payload {
			masked[i] = payload[i] ^ key[i%4]
		}
		return append(b, masked...)
	}
	return append(b, payload...)
}

func TestReadMessages(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 70000)
	var in []byte
	in = append(in, frame(opBinary, true, []byte{streamStdout}, false)...) // a stream's opening
	in = append(in, frame(opBinary, false, append([]byte{streamStdout}, "hello "...), false)...)
	in = append(in, frame(opContinuation, true, []byte("world"), false)...)
	in = append(in, frame(0x9, true, []byte("ping"), false)...)
	in = append(in, frame(opBinary, true, append([]byte{streamStderr}, "warn"...), true)...)
	in = append(in, frame(opBinary, true, append([]byte{streamStdout}, big...), false)...)
	in = append(in, frame(opBinary, true, append([]byte{streamError}, `{"status":"Failure","message":"command terminated with non-zero exit code"}`...), false)...)
	in = append(in, frame(opClose, true, nil, false)...)
	in = append(in, frame(opBinary, true, append([]byte{streamStdout}, "after close"...), false)...)

	got := map[byte]string{}
	if err := readMessages(bufio.NewReader(bytes.NewReader(in)), func(s byte, d []byte) error {
		got[s] += string(d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[byte]string{
		streamStdout: "hello world" + string(big),
		streamStderr: "warn",
		streamError:  `{"status":"Failure","message":"command terminated with non-zero exit code"}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("streams (-want +got):\n%s", diff)
	}
	if err := statusError([]byte(got[streamError])); err == nil || err.Error() != "command terminated with non-zero exit code" {
		t.Errorf("statusError: %v", err)
	}
	if err := statusError([]byte(`{"status":"Success"}`)); err != nil {
		t.Errorf("statusError of success: %v", err)
	}

	truncated := frame(opBinary, true, append([]byte{streamStdout}, "abc"...), false)
	if err := readMessages(bufio.NewReader(bytes.NewReader(truncated[:len(truncated)-1])), func(byte, []byte) error { return nil }); err == nil {
		t.Error("a truncated frame is not an error")
	}
}

// TestExecWebSocket runs execWebSocket against a server that speaks the apiserver's side of
// pods/exec: the upgrade with the client's credentials and a channel protocol, then stdout,
// stderr and the command's status, then close.
func TestExecWebSocket(t *testing.T) {
	cases := map[string]struct {
		status     string
		refuse     bool
		wantOut    string
		wantErr    string
		wantStderr string
	}{
		"success": {status: `{"status":"Success"}`, wantOut: "node list", wantStderr: "warning"},
		"command failed": {status: `{"status":"Failure","message":"command terminated with non-zero exit code: exit 2"}`,
			wantOut: "node list", wantStderr: "warning", wantErr: "command terminated with non-zero exit code: exit 2"},
		"refused": {refuse: true, wantErr: `the apiserver answered 403 Forbidden: pods "p" is forbidden`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if got := r.Header.Get("Authorization"); got != "Bearer the-token" {
					t.Errorf("Authorization %q", got)
				}
				if r.Header.Get("Upgrade") != "websocket" || !strings.Contains(r.Header.Get("Sec-WebSocket-Protocol"), "v5.channel.k8s.io") {
					t.Errorf("not an upgrade to the channel protocol: %v", r.Header)
				}
				if r.URL.Query()["command"][1] != "-N" {
					t.Errorf("command %v", r.URL.Query()["command"])
				}
				if tc.refuse {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusForbidden)
					_, _ = w.Write([]byte(`{"kind":"Status","status":"Failure","message":"pods \"p\" is forbidden","code":403}`))
					return
				}
				conn, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n")
				_, _ = rw.Write(frame(opBinary, true, append([]byte{streamStdout}, "node list"...), false))
				_, _ = rw.Write(frame(opBinary, true, append([]byte{streamStderr}, "warning"...), false))
				_, _ = rw.Write(frame(opBinary, true, append([]byte{streamError}, tc.status...), false))
				_, _ = rw.Write(frame(opClose, true, nil, false))
				_ = rw.Flush()
			}))
			defer srv.Close()
			rt, err := execTransport(&rest.Config{Host: srv.URL, BearerToken: "the-token"})
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(srv.URL + "/api/v1/namespaces/ns/pods/p/exec?command=nvidia-imex-ctl&command=-N&stdout=true&stderr=true")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, stderr, err := execWebSocket(ctx, rt, u)
			if string(out) != tc.wantOut || string(stderr) != tc.wantStderr {
				t.Errorf("stdout %q stderr %q, want %q and %q", out, stderr, tc.wantOut, tc.wantStderr)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
