package debugbundle

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
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
