package kubelet

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// selfSignedCert makes one serving certificate for every node's address and name, in memory.
// The apiserver does not verify it unless it runs with --kubelet-certificate-authority.
func selfSignedCert(ips []netip.Addr, names []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "cdplane-sim-kubelet"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    names,
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("creating the kubelet serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// serveLogs listens on the node's address and serves /containerLogs until ctx ends.
func (n *node) serveLogs(ctx context.Context, wg *sync.WaitGroup) error {
	addr := net.JoinHostPort(n.ip.String(), strconv.Itoa(n.k.cfg.KubeletPort))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("node %s: serving logs: %w", n.spec.Name, err)
	}
	n.mu.Lock()
	n.port = l.Addr().(*net.TCPAddr).Port
	n.mu.Unlock()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", n.containerLogs)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	// Only the apiserver reads logs, with its kubelet client certificate: on a shared host no
	// other local user may read pods' logs. A client certificate signed by the cluster's CA is
	// required, as a real kubelet with --client-ca-file does.
	clientCAs := x509.NewCertPool()
	if !clientCAs.AppendCertsFromPEM(n.k.cfg.APIServerCA) {
		_ = l.Close()
		return fmt.Errorf("node %s: serving logs: no CA certificate to verify the apiserver's client certificate with", n.spec.Name)
	}
	srv := &http.Server{
		Handler: mux,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{n.k.cert}, MinVersion: tls.VersionTLS12,
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs},
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          nil,
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving container logs", "node", n.spec.Name)
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}

// logQuery are the parameters of a container log request that are simulated.
type logQuery struct {
	follow     bool
	previous   bool
	tailLines  int64 // -1: all
	limitBytes int64 // -1: no limit
}

func parseLogQuery(r *http.Request) (logQuery, error) {
	q := logQuery{tailLines: -1, limitBytes: -1}
	v := r.URL.Query()
	var err error
	if s := v.Get("follow"); s != "" {
		if q.follow, err = strconv.ParseBool(s); err != nil {
			return q, fmt.Errorf("follow: %w", err)
		}
	}
	if s := v.Get("previous"); s != "" {
		if q.previous, err = strconv.ParseBool(s); err != nil {
			return q, fmt.Errorf("previous: %w", err)
		}
	}
	for name, p := range map[string]*int64{"tailLines": &q.tailLines, "limitBytes": &q.limitBytes} {
		if s := v.Get(name); s != "" {
			if *p, err = strconv.ParseInt(s, 10, 64); err != nil || *p < 0 {
				return q, fmt.Errorf("%s: want a non-negative integer", name)
			}
		}
	}
	return q, nil
}

func (n *node) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, podName, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	q, err := parseLogQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pw := n.k.workerByName(n.spec.Name, ns, podName)
	if pw == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, podName, n.spec.Name), http.StatusNotFound)
		return
	}
	path, live, err := pw.logFile(container, q.previous)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	if q.tailLines >= 0 {
		off, err := tailOffset(f, q.tailLines)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	var out io.Writer = w
	if q.limitBytes >= 0 {
		out = &limitWriter{w: w, left: q.limitBytes}
	}
	if !q.follow || live == nil {
		_, _ = io.Copy(out, f)
		return
	}
	followLog(r.Context(), out, w, f, live)
}

// followLog copies f to out as it grows until the container instance has exited (live is
// closed) and everything it wrote was sent, or the client goes away.
func followLog(ctx context.Context, out io.Writer, w http.ResponseWriter, f *os.File, live <-chan struct{}) {
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		exited := false
		select {
		case <-live:
			exited = true
		default:
		}
		for {
			k, err := f.Read(buf)
			if k > 0 {
				if _, werr := out.Write(buf[:k]); werr != nil {
					return
				}
			}
			if err != nil {
				break
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		if exited {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-live:
		}
	}
}

type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.ErrShortWrite
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	k, err := l.w.Write(p)
	l.left -= int64(k)
	return k, err
}

// tailOffset returns the offset of the start of the last n lines of f (a final line without a
// newline counts as a line).
func tailOffset(f io.ReaderAt, n int64) (int64, error) {
	size, err := sizeOf(f)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return size, nil
	}
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	pos := size
	lines := int64(0)
	first := true
	for pos > 0 {
		k := int64(chunk)
		if pos < k {
			k = pos
		}
		pos -= k
		if _, err := f.ReadAt(buf[:k], pos); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		b := buf[:k]
		if first && len(b) > 0 && b[len(b)-1] == '\n' {
			b = b[:len(b)-1] // the file's final newline ends the last line
		}
		first = false
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] == '\n' {
				lines++
				if lines == n {
					return pos + int64(i) + 1, nil
				}
			}
		}
	}
	return 0, nil
}

func sizeOf(f io.ReaderAt) (int64, error) {
	if s, ok := f.(interface{ Stat() (os.FileInfo, error) }); ok {
		fi, err := s.Stat()
		if err != nil {
			return 0, err
		}
		return fi.Size(), nil
	}
	if b, ok := f.(*bytes.Reader); ok {
		return b.Size(), nil
	}
	if s, ok := f.(*strings.Reader); ok {
		return s.Size(), nil
	}
	return 0, errors.New("cannot size the log")
}
