package imex_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cdplane/internal/imex"
)

// Example shows how the ComputeDomain daemon drives IMEX: start once its entry and index
// appear (no SIGUSR1 on a first start), reload or restart on membership changes as the files
// require, restart after IMEX dies, and stop on shutdown. membership delivers the clique's
// current members whenever they change.
func Example() {
	settings := imex.Settings{
		DNSNames:        true,
		DomainUID:       "5d1c2b7e-4f0a-4b7e-9c61-0c2f5a1e9d10",
		BindIP:          "10.0.0.1",
		IMEXConfigPath:  "/imexd/imexd.cfg",
		NodesConfigPath: "/imexd/nodes.cfg",
		HostsPath:       "/etc/hosts",
	}
	ctx := context.Background()
	membership := make(chan []imex.Peer)
	var daemon imex.Interface = imex.NewReal(imex.Options{ConfigPath: settings.IMEXConfigPath})
	_ = supervise(ctx, daemon, settings, membership)
}

func supervise(ctx context.Context, daemon imex.Interface, s imex.Settings, membership <-chan []imex.Peer) error {
	var exited <-chan error // nil until IMEX runs
	var restart <-chan time.Time
	var peers []imex.Peer
	start := func() error {
		var err error
		exited, err = daemon.Start(ctx)
		if err != nil {
			restart = time.After(time.Second) // e.g. a config the simulated IMEX refused
		}
		return err
	}
	for {
		select {
		case <-ctx.Done():
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return daemon.Stop(stopCtx)
		case peers = <-membership:
			changes, err := imex.WriteConfig(s, peers)
			if err != nil {
				return fmt.Errorf("writing IMEX config: %w", err)
			}
			switch {
			case exited == nil && restart == nil:
				_ = start() // first start: IMEX reads every file, no reload
			case exited == nil:
				// Waiting to restart; the restart will read the new files.
			case changes.Action() == imex.ActionReload:
				if err := daemon.Reload(); err != nil && !errors.Is(err, imex.ErrNotRunning) {
					return err
				}
			case changes.Action() == imex.ActionRestart:
				if err := daemon.Stop(ctx); err != nil {
					return err
				}
				if err := <-exited; err != nil { // nil after a clean Stop
					return err
				}
				_ = start()
			}
		case err := <-exited:
			fmt.Println("IMEX ended, restarting:", err)
			exited, restart = nil, time.After(time.Second)
		case <-restart:
			restart = nil
			_ = start()
		}
	}
}
