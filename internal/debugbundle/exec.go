package debugbundle

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// pods/exec over WebSocket, the apiserver's channel protocol, reading only: the command gets no
// stdin and no terminal, so the client reads binary messages whose first byte names the stream
// (1 stdout, 2 stderr, 3 the command's status as a metav1.Status) until the server closes. This
// is the part of client-go's remotecommand the bundle needs, without its streaming modules.

// Channel protocols offered, newest first.
var execProtocols = "v5.channel.k8s.io, v4.channel.k8s.io"

// Streams of the channel protocol.
const (
	streamStdout = 1
	streamStderr = 2
	streamError  = 3
)

// maxExecBytes bounds what one command may return.
const maxExecBytes = 64 << 20

// execTransport returns a round tripper for the upgrade: the config's TLS and authentication,
// HTTP/1.1 only (a WebSocket upgrade is not possible over HTTP/2).
func execTransport(cfg *rest.Config) (http.RoundTripper, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("TLS configuration: %w", err)
	}
	if tlsConfig != nil {
		tlsConfig.NextProtos = []string{"http/1.1"}
	}
	t := &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: tlsConfig}
	if cfg.Proxy != nil {
		t.Proxy = cfg.Proxy
	}
	rt, err := rest.HTTPWrappersForConfig(cfg, t)
	if err != nil {
		return nil, fmt.Errorf("authentication: %w", err)
	}
	return rt, nil
}

// execWebSocket runs the exec request u (the pods/exec URL with its command) and returns what
// the command wrote to stdout and stderr.
func execWebSocket(ctx context.Context, rt http.RoundTripper, u *url.URL) (stdout, stderr []byte, err error) {
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), http.NoBody)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(key))
	req.Header.Set("Sec-WebSocket-Protocol", execProtocols)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, nil, fmt.Errorf("the apiserver answered %s: %s", resp.Status, statusMessage(body))
	}
	stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
	defer stop()
	var out, errOut []byte
	var status []byte
	total := 0
	err = readMessages(bufio.NewReader(resp.Body), func(stream byte, data []byte) error {
		total += len(data)
		if total > maxExecBytes {
			return fmt.Errorf("the command wrote more than %d bytes", maxExecBytes)
		}
		switch stream {
		case streamStdout:
			out = append(out, data...)
		case streamStderr:
			errOut = append(errOut, data...)
		case streamError:
			status = append(status, data...)
		}
		return nil
	})
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return out, errOut, err
	}
	return out, errOut, statusError(status)
}

// statusError returns the command's failure from the error stream's metav1.Status; nil when it
// succeeded or said nothing.
func statusError(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	var s metav1.Status
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New(string(data))
	}
	if s.Status == metav1.StatusSuccess {
		return nil
	}
	return errors.New(s.Message)
}

// statusMessage returns the message of a metav1.Status body, or the body.
func statusMessage(body []byte) string {
	var s metav1.Status
	if json.Unmarshal(body, &s) == nil && s.Message != "" {
		return s.Message
	}
	return string(body)
}

// WebSocket opcodes.
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
)

// readMessages reads WebSocket frames from the server until it closes, and passes each data
// frame's payload to fn with its stream (the first byte of the message's first frame).
func readMessages(r *bufio.Reader, fn func(stream byte, data []byte) error) error {
	var stream byte
	inMessage := false
	for {
		op, payload, err := readFrame(r)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
		switch op {
		case opClose:
			return nil
		case opText, opBinary:
			if len(payload) == 0 {
				continue
			}
			stream, payload, inMessage = payload[0], payload[1:], true
		case opContinuation:
			if !inMessage {
				continue
			}
		default: // ping, pong: nothing to answer for a read-only stream this short
			continue
		}
		if err := fn(stream, payload); err != nil {
			return err
		}
	}
}

// readFrame reads one frame (RFC 6455, section 5.2).
func readFrame(r *bufio.Reader) (op byte, payload []byte, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	op = hdr[0] & 0x0f
	masked := hdr[1]&0x80 != 0
	n := uint64(hdr[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, unexpected(err)
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, unexpected(err)
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > maxExecBytes {
		return 0, nil, fmt.Errorf("a WebSocket frame of %d bytes", n)
	}
	var mask [4]byte
	if masked {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, unexpected(err)
		}
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, unexpected(err)
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return op, payload, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
