package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
)

// assignFlags are the flags of assign and unassign.
type assignFlags struct {
	id         string
	kubeconfig string
	force      bool
	check      bool
	timeout    time.Duration
	quota      lifecycle.Quota
}

func newAssignCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "assign",
		Short: "Assign a namespace or node to a control plane (cluster administrators)",
		Long: `Sets the label ` + cdv1beta1.ControlPlaneLabel + `=<id> on a namespace or node and, for a
namespace, creates the plane's RoleBindings and its ResourceQuota (--max-domains,
--max-channels) in it. Refused, with the reason and with nothing
changed, when the target carries another plane's label, when it holds (a namespace) or serves (a
node) live ComputeDomains of another plane, the legacy plane included, or when a same-named
RoleBinding exists that is not the plane's. Assigning what the plane already owns changes
nothing. Only cluster administrators may change the label (see docs/control-planes.md).`,
	}
	cmd.AddCommand(newAssignKindCommand(lifecycle.KindNamespace, false), newAssignKindCommand(lifecycle.KindNode, false))
	return cmd
}

func newUnassignCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "unassign",
		Short: "Remove a namespace or node from a control plane (cluster administrators)",
		Long: `Removes the label ` + cdv1beta1.ControlPlaneLabel + ` from a namespace or node that the plane owns
and, for a namespace, the plane's mirrored Secrets and RoleBindings in it; the target then belongs
to the legacy plane.
Refused when another plane owns the target, and while it still holds (namespace) or serves (node)
live ComputeDomains of the plane, unless --force. A namespace is refused, --force or not, while it
holds ResourceClaims that compute-domain.nvidia.com allocated and pods use: the plane keeps its
RoleBindings there until those pods are gone.`,
	}
	cmd.AddCommand(newAssignKindCommand(lifecycle.KindNamespace, true), newAssignKindCommand(lifecycle.KindNode, true))
	return cmd
}

func newAssignKindCommand(kind lifecycle.TargetKind, unassign bool) *cobra.Command {
	var f assignFlags
	verb := "assign"
	if unassign {
		verb = "unassign"
	}
	cmd := &cobra.Command{
		Use:   string(kind) + " NAME --" + plane.FlagName + " ID",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " a " + string(kind),
		Args: func(cmd *cobra.Command, args []string) error {
			if f.check {
				if len(args) != 0 {
					return fmt.Errorf("--check takes no %s name, got %d arguments: it checks every recorded node", kind, len(args))
				}
				return nil
			}
			if len(args) != 1 {
				return fmt.Errorf("want exactly one %s name, got %d arguments (usage: %s)", kind, len(args), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.check {
				return checkNodes(cmd, f)
			}
			t := lifecycle.Target{Kind: kind, Name: args[0]}
			// The id and the name are checked before the kubeconfig is read.
			if err := errors.Join(f.validate(), lifecycle.ValidateAssignment(f.id, t)); err != nil {
				return refused(verb, err)
			}
			c, err := assignClient(cmd, f)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			var res *lifecycle.Result
			if unassign {
				res, err = lifecycle.Unassign(ctx, c, f.id, t, f.force)
			} else {
				res, err = lifecycle.AssignWithQuota(ctx, c, f.id, t, f.quota)
			}
			printResult(cmd, verb, t, f.id, res, err)
			return refused(verb, err)
		},
	}
	fs := cmd.Flags()
	plane.AddFlag(fs, &f.id)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "How long the command may take, retrying API requests that fail transiently")
	if kind == lifecycle.KindNode && !unassign {
		fs.BoolVar(&f.check, "check", false, "Check every recorded node assignment (of the plane given, or of every plane) instead of assigning: report nodes that lost their label (deleted and registered again) with the command that restores it; exit 1 if any did")
		cmd.Long = `Sets the plane label on the node and records the assignment in ConfigMap
` + lifecycle.NodeAssignmentsNamespace + "/" + lifecycle.NodeAssignmentsName + `, where only administrators write. A deleted node that
registers again comes back without the label (a kubelet cannot set it): ` + "`" + `cdplane assign node --check` + "`" + `
(no NAME) reports such nodes with the command that restores each.`
	}
	if kind == lifecycle.KindNamespace && !unassign {
		fs.Int64Var(&f.quota.Domains, "max-domains", lifecycle.DefaultQuotaDomains,
			"ComputeDomains the namespace may hold (the plane's ResourceQuota "+lifecycle.QuotaName("<id>")+"); 0: unbounded")
		fs.Int64Var(&f.quota.Channels, "max-channels", lifecycle.DefaultQuotaChannels,
			"Channel devices its claims may request at once, one per pod and node of its jobs (same ResourceQuota); 0: unbounded")
	}
	if unassign {
		fs.BoolVar(&f.force, "force", false, "Unassign even though live ComputeDomains of the plane remain (the plane stops reconciling them); never while pods use claims of cdplane's driver there")
	}
	return cmd
}

// refused says that an ownership rule refused the command (nothing changed); other errors pass
// unchanged.
func refused(verb string, err error) error {
	if lifecycle.IsRefused(err) {
		return fmt.Errorf("%s refused: %w", verb, err)
	}
	return err
}

// printResult prints what an assign or unassign changed and, unless it failed (then the error
// says what is left), its outcome.
func printResult(cmd *cobra.Command, verb string, t lifecycle.Target, id string, res *lifecycle.Result, err error) {
	if res == nil {
		return
	}
	w := cmd.OutOrStdout()
	for _, c := range res.Changes {
		fmt.Fprintln(w, c)
	}
	for _, warning := range res.Warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", warning)
	}
	if err != nil {
		return
	}
	to := "to"
	if verb == "unassign" {
		to = "from"
	}
	if len(res.Changes) == 0 {
		fmt.Fprintf(w, "%s already %sed %s control plane %q: nothing changed\n", t, verb, to, id)
		return
	}
	fmt.Fprintf(w, "%s %sed %s control plane %q\n", t, verb, to, id)
}

func (f *assignFlags) validate() error {
	if f.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	return nil
}

// assignClient builds a client from a kubeconfig (the given file, or the usual loading rules)
// whose requests are retried while they fail transiently, within --timeout, saying so on the
// command's output.
func assignClient(cmd *cobra.Command, f assignFlags) (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg = lifecycle.WithRetries(cfg, cmd.OutOrStdout(), f.timeout)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := cdv1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	return c, nil
}

// checkNodes reports the recorded node assignments that do not hold (lifecycle.CheckNodeAssignments):
// an error when a node exists without its plane's label or with another's, or a labelled node
// is not recorded; a recorded node that does not exist is only reported.
func checkNodes(cmd *cobra.Command, f assignFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	if f.id != "" {
		if err := plane.ValidateID(f.id); err != nil {
			return err
		}
	}
	c, err := assignClient(cmd, f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	findings, holding, err := lifecycle.NodeAssignmentReport(ctx, c, f.id)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	broken := 0
	for _, fd := range findings {
		fmt.Fprintln(w, fd.Message)
		if !fd.Absent {
			broken++
		}
	}
	whose := "their control plane's"
	if f.id != "" {
		whose = fmt.Sprintf("control plane %q's", f.id)
	}
	fmt.Fprintf(w, "%d assigned node(s) carry %s label\n", holding, whose)
	if broken > 0 {
		return fmt.Errorf("%d node assignment(s) do not hold; the commands above repair them", broken)
	}
	return nil
}
