package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/strvals"

	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/refusal"
)

// lifecycleFlags are the flags of install, apply and destroy.
type lifecycleFlags struct {
	kube          *kubeFlags
	id            string
	valueFiles    []string
	sets          []string
	wait          bool
	timeout       time.Duration
	deleteDomains bool
	verbose       bool
	resetValues   bool
}

func (f *lifecycleFlags) addCommon(cmd *cobra.Command) {
	f.kube = newKubeFlags(false)
	f.kube.add(cmd)
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Minute, "How long to wait for each step")
	// --verbose was the switch for Helm's log before -v; kept so that scripts still work.
	cmd.Flags().BoolVar(&f.verbose, "verbose", false, "Print Helm's own log too")
	_ = cmd.Flags().MarkDeprecated("verbose", "use -v 1")
}

func (f *lifecycleFlags) addValues(cmd *cobra.Command, upgrade bool) {
	cmd.Flags().StringArrayVarP(&f.valueFiles, "values", "f", nil, "Chart values from a YAML file (repeatable; later files win)")
	cmd.Flags().StringArrayVar(&f.sets, "set", nil, "A chart value, key=value as with helm --set (repeatable; wins over files)")
	if upgrade {
		cmd.Flags().BoolVar(&f.resetValues, "reset-values", false, "Start from the chart's defaults instead of the values the release holds (by default the values set at install or an earlier apply stay, and --values/--set are merged over them; key=null removes one)")
	}
}

// valuesMode is how apply treats the values the release holds (--reset-values).
func (f *lifecycleFlags) valuesMode() lifecycle.Values {
	if f.resetValues {
		return lifecycle.ResetValues
	}
	return lifecycle.KeepValues
}

// validate checks the common flags; like every check of flags and arguments, it runs before the
// kubeconfig is loaded.
func (f *lifecycleFlags) validate() error {
	if f.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	return nil
}

// validateID checks --control-plane-id.
func (f *lifecycleFlags) validateID() error {
	return plane.ValidateID(f.id)
}

// manager is a lifecycle Manager on the cluster the kubeconfig flags select. Helm's own log goes
// to stderr with -v 1 or more (or --verbose), apart from the progress on stdout.
func (f *lifecycleFlags) manager(cmd *cobra.Command) (*lifecycle.Manager, error) {
	opts := lifecycle.Options{Getter: f.kube.getter(), Out: cmd.OutOrStdout(), Timeout: f.timeout, Wait: f.wait}
	if f.verbose || verbosity(cmd) >= 1 {
		opts.HelmLog = cmd.ErrOrStderr()
	}
	return lifecycle.New(opts)
}

// values merges the value files and --set flags as helm does.
func (f *lifecycleFlags) values() (map[string]any, error) {
	vals := map[string]any{}
	for _, file := range f.valueFiles {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--values: %w", err)
		}
		v, err := loader.LoadValues(bytesReader(data))
		if err != nil {
			return nil, fmt.Errorf("--values %s: %w", file, err)
		}
		vals = loader.MergeMaps(vals, v)
	}
	for _, s := range f.sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return vals, nil
}

func newInstallCommand() *cobra.Command {
	return newDeployCommand("install", "Install the shared prerequisites or one control plane (Helm releases)", false)
}

func newApplyCommand() *cobra.Command {
	return newDeployCommand("apply", "Upgrade the shared prerequisites or one control plane to this version and these values", true)
}

func newDeployCommand(verb, short string, upgrade bool) *cobra.Command {
	cmd := &cobra.Command{Use: verb, Short: short}
	var pf lifecycleFlags
	prereq := &cobra.Command{
		Use:   "prerequisites",
		Short: "The CRDs, DeviceClasses and admission policies every plane shares (once per cluster)",
		Example: "  cdplane " + verb + " prerequisites\n" +
			"  cdplane " + verb + " prerequisites --set adminGroups={system:masters} --context prod",
		Long: `Installs (or upgrades) Helm release ` + lifecycle.PrerequisitesRelease + ` in namespace ` + lifecycle.PrerequisitesNamespace + `,
then waits until the ComputeDomain API is served and its admission policies admit writes. An
existing object with one of its names that the release does not own stops it before any change.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pf.validate(); err != nil {
				return usage(err)
			}
			vals, err := pf.values()
			if err != nil {
				return usage(err)
			}
			if _, err := lifecycle.RenderPrerequisites(vals); err != nil {
				return usage(err)
			}
			m, err := pf.manager(cmd)
			if err != nil {
				return err
			}
			if upgrade {
				return m.ApplyPrerequisites(cmd.Context(), vals, pf.valuesMode())
			}
			return m.InstallPrerequisites(cmd.Context(), vals)
		},
	}
	pf.addCommon(prereq)
	pf.addValues(prereq, upgrade)

	var f lifecycleFlags
	planeCmd := &cobra.Command{
		Use:     "plane --" + plane.FlagName + " ID",
		Short:   "One control plane: controller, kubelet plugin, service accounts, RBAC",
		Example: deployPlaneExample(verb),
		Long: `Installs (or upgrades) control plane ID as Helm release <ID>-cdplane in namespace
<ID>-cdplane (the legacy plane, with an empty id: release and namespace "cdplane"). Before any
change it checks that every namespace the plane will use is absent or already labelled for it,
and that every cluster-scoped object it will write is absent or owned by its release under the
plane's canonical name; otherwise it stops, naming the object, and changes nothing. It creates
the namespace labelled for the plane, installs the release and, with --wait (the default),
waits for the controller and the kubelet plugin to be ready, printing progress.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := errors.Join(f.validate(), f.validateID()); err != nil {
				return usage(err)
			}
			vals, err := f.values()
			if err != nil {
				return usage(err)
			}
			mode := lifecycle.ResetValues // an install starts from the chart's defaults
			if upgrade {
				mode = f.valuesMode()
			}
			if err := lifecycle.CheckPlaneValues(f.id, vals, mode); err != nil {
				return usage(err)
			}
			m, err := f.manager(cmd)
			if err != nil {
				return err
			}
			if upgrade {
				return m.ApplyPlane(cmd.Context(), f.id, vals, mode)
			}
			return m.InstallPlane(cmd.Context(), f.id, vals)
		},
	}
	f.addCommon(planeCmd)
	f.addValues(planeCmd, upgrade)
	plane.AddFlag(planeCmd.Flags(), &f.id)
	planeCmd.Flags().BoolVar(&f.wait, "wait", true, "Wait for the controller and the kubelet plugin to be ready")
	cmd.AddCommand(prereq, planeCmd)
	return cmd
}

func newDestroyCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "destroy", Short: "Remove one control plane, or the shared prerequisites once no plane is left"}
	var pf lifecycleFlags
	prereq := &cobra.Command{
		Use:     "prerequisites",
		Short:   "Uninstall the shared prerequisites (refused while any plane or ComputeDomain exists)",
		Example: "  cdplane destroy prerequisites",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pf.validate(); err != nil {
				return usage(err)
			}
			m, err := pf.manager(cmd)
			if err != nil {
				return err
			}
			return m.DestroyPrerequisites(cmd.Context())
		},
	}
	pf.addCommon(prereq)
	var f lifecycleFlags
	planeCmd := &cobra.Command{
		Use:   "plane --" + plane.FlagName + " ID",
		Short: "Remove control plane ID and everything it created, nothing else",
		Example: "  cdplane destroy plane --" + plane.FlagName + " plane-a\n" +
			"  cdplane destroy plane --" + plane.FlagName + " plane-a --delete-domains\n" +
			"  cdplane destroy plane --" + plane.FlagName + "=   # the legacy plane",
		Long: `Refused while the plane has ComputeDomains, unless --delete-domains: then each is deleted
(re-checked right before) and destroy waits until the controller has run its finalizer. Then the
plane's namespaces and nodes are unassigned (labels, RoleBindings, mirrored Secrets), its Helm
release is uninstalled and its namespace deleted. Anything still carrying the plane's label or
one of its canonical cluster-scoped names afterwards is reported, never swept. The legacy plane
(empty id) is removed by its canonical names only, and only when named explicitly
(--` + plane.FlagName + `=): without the flag or $` + plane.EnvVar + `, destroy refuses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := errors.Join(usage(f.validate()), explicitID(cmd), usage(f.validateID())); err != nil {
				return err
			}
			m, err := f.manager(cmd)
			if err != nil {
				return err
			}
			return m.DestroyPlane(cmd.Context(), f.id, f.deleteDomains)
		},
	}
	f.addCommon(planeCmd)
	plane.AddFlag(planeCmd.Flags(), &f.id)
	planeCmd.Flags().BoolVar(&f.deleteDomains, "delete-domains", false, "Delete the plane's ComputeDomains and wait for their clean-up first")
	cmd.AddCommand(prereq, planeCmd)
	return cmd
}

// deployPlaneExample is the Example of install plane and apply plane.
func deployPlaneExample(verb string) string {
	if verb == "install" {
		return "  cdplane install plane --" + plane.FlagName + " plane-a --set image.repository=registry.example/cdplane\n" +
			"  cdplane install plane --" + plane.FlagName + " plane-a -f values.yaml -v 1"
	}
	return "  cdplane apply plane --" + plane.FlagName + " plane-a --set logVerbosity=4\n" +
		"  cdplane apply plane --" + plane.FlagName + " plane-a --reset-values -f values.yaml"
}

// explicitID refuses a destructive command whose plane was not named: neither the flag nor the
// environment variable gave an id, so the default, the legacy plane, would be destroyed.
func explicitID(cmd *cobra.Command) error {
	if cmd.Flags().Changed(plane.FlagName) || os.Getenv(plane.EnvVar) != "" {
		return nil
	}
	return refusal.Errorf("name the control plane to destroy: --%s ID, or --%s= for the legacy plane", plane.FlagName, plane.FlagName)
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
