package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"cdplane/internal/debugbundle"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/lifecycle"
	"cdplane/internal/version"
)

// debugBundleFlags are the flags of debug bundle.
type debugBundleFlags struct {
	output   string
	kube     *kubeFlags
	logLines int64
	timeout  time.Duration
}

func newDebugCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "debug",
		Short: "Collect what support needs to diagnose cdplane on a cluster",
	}
	cmd.AddCommand(newDebugBundleCommand(), newDebugNodeFilesCommand())
	return cmd
}

func newDebugBundleCommand() *cobra.Command {
	var f debugBundleFlags
	cmd := &cobra.Command{
		Use: "bundle [-o FILE]",
		Example: `  cdplane debug bundle
  cdplane debug bundle -o /tmp/cdplane-debug.tar.gz --context prod
  cdplane debug bundle --log-lines 5000 --as admin --as-group system:masters`,
		Short: "Write a tar.gz of the planes' and domains' state, events, logs and node files",
		Long: `Writes one gzipped tar (default cdplane-debug-<UTC time>.tar.gz in the current directory) with:
status/planes.json and domains/<ns>/<name>/status.json (cdplane status -o json of every plane and
every ComputeDomain); every ComputeDomain and ComputeDomainClique; each domain's ResourceClaims,
the pods they are reserved for and the events about all of them; the nodes' labels, taints and
conditions; the ResourceSlices of compute-domain.nvidia.com; each driver namespace's pods,
DaemonSets, Deployments, ResourceClaims and events; the last --log-lines lines of every container
of the cdplane pods (controller, kubelet plugins, daemons), the previous instance's too; each
kubelet plugin's checkpoint and CDI specs, and nvidia-imex-ctl -N from each daemon pod (through
pods/exec). A step that fails (a log that cannot be read, an exec refused) is a line in
errors.txt and in manifest.json, which lists every file; the bundle goes on.

Secrets are never read. Token-like strings (bearer tokens, token and password fields, JSON Web
Tokens such as service account tokens) are replaced by REDACTED in every file.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDebugBundle(cmd, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.output, "output", "o", "", "File to write (default cdplane-debug-<UTC time>.tar.gz in the current directory)")
	f.kube = newKubeFlags(false)
	f.kube.add(cmd)
	fs.Int64Var(&f.logLines, "log-lines", debugbundle.DefaultLogLines, "Lines kept of each container's log (current and previous)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "How long one API request may take, retrying requests that fail transiently")
	return cmd
}

func runDebugBundle(cmd *cobra.Command, f debugBundleFlags) (err error) {
	switch {
	case f.logLines <= 0:
		return usage(fmt.Errorf("--log-lines must be positive, got %d", f.logLines))
	case f.timeout <= 0:
		return usage(fmt.Errorf("--timeout must be positive, got %s", f.timeout))
	}
	now := time.Now().UTC()
	if f.output == "" {
		f.output = "cdplane-debug-" + now.Format("20060102T150405Z") + ".tar.gz"
	}
	if info, statErr := os.Stat(f.output); statErr == nil && info.IsDir() {
		return usage(fmt.Errorf("cannot write the bundle to %s: it is a directory", f.output))
	}
	// Written beside the output and renamed at the end: a failure leaves no half bundle, and
	// an existing file is replaced only by a complete one.
	file, err := os.CreateTemp(filepath.Dir(f.output), "."+filepath.Base(f.output)+".*.partial")
	if err != nil {
		return fmt.Errorf("cannot write the bundle to %s: %w", f.output, err)
	}
	defer func() {
		if cerr := file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing the bundle to %s: %w", f.output, cerr)
		}
		if err == nil {
			if rerr := os.Rename(file.Name(), f.output); rerr != nil {
				err = fmt.Errorf("cannot write the bundle to %s: %w", f.output, rerr)
			}
		}
		if err != nil {
			_ = os.Remove(file.Name())
		}
	}()

	cfg, err := f.kube.restConfig()
	if err != nil {
		return err
	}
	lifecycle.WithCommandRates(cfg)
	if !cmd.Flags().Changed("request-timeout") {
		cfg.Timeout = f.timeout
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	c, err := f.kube.client(cmd.ErrOrStderr(), f.timeout)
	if err != nil {
		return err
	}

	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "Writing the debug bundle to %s\n", f.output)
	a := debugbundle.NewArchive(file, now, version.Version)
	collectErr := debugbundle.Collect(cmd.Context(), debugbundle.Options{
		Client: c, Clientset: clientset, Config: cfg, LogLines: f.logLines, Progress: stderr, Now: now,
	}, a)
	if closeErr := a.Close(); collectErr != nil || closeErr != nil {
		return errors.Join(collectErr, closeErr)
	}
	m := a.Manifest()
	fmt.Fprintf(stderr, "Wrote %d files; %d steps failed (listed in %s inside the bundle)\n", len(m.Files), len(m.Failures), debugbundle.ErrorsFile)
	fmt.Fprintln(cmd.OutOrStdout(), f.output)
	return nil
}

// newDebugNodeFilesCommand is what the bundle runs in a kubelet plugin's container (the image
// holds this binary) to read the plugin's checkpoint and CDI specs: a tar on stdout.
func newDebugNodeFilesCommand() *cobra.Command {
	var stateDir, cdiRoot string
	cmd := &cobra.Command{
		Use:    "node-files",
		Short:  "Write the kubelet plugin's checkpoint and CDI specs to stdout as a tar (run in its container by debug bundle)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return debugbundle.WriteNodeFiles(cmd.OutOrStdout(), stateDir, cdiRoot)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", kubeletplugin.DefaultPluginDataDir, "The kubelet plugin's --state-dir")
	cmd.Flags().StringVar(&cdiRoot, "cdi-root", kubeletplugin.DefaultCDIRoot, "The kubelet plugin's --cdi-root")
	return cmd
}
