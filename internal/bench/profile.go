package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"

	"k8s.io/client-go/rest"
)

// startProfiles starts, when o.ProfileDir is set, a CPU profile of this process and fetches one
// of the kube-apiserver (its /debug/pprof, on by default, readable by an administrator) over
// o.ProfileSeconds. The returned stop ends this process's profile and waits for the
// apiserver's; it reports what could not be written.
func startProfiles(ctx context.Context, cfg *rest.Config, o Options, mode string) (func() error, error) {
	if o.ProfileDir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
		return nil, err
	}
	own, err := os.Create(filepath.Join(o.ProfileDir, mode+".bench.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(own); err != nil {
		_ = own.Close()
		return nil, fmt.Errorf("profiling this process: %w", err)
	}
	seconds := o.ProfileSeconds
	if seconds <= 0 {
		seconds = 30
	}
	apiDone := make(chan error, 1)
	go func() {
		apiDone <- fetchAPIServerProfile(ctx, cfg, seconds, filepath.Join(o.ProfileDir, mode+".apiserver.pprof"))
	}()
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(own.Close(), <-apiDone)
	}, nil
}

func fetchAPIServerProfile(ctx context.Context, cfg *rest.Config, seconds int, path string) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", cfg.Host, seconds), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("kube-apiserver profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-apiserver profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}
