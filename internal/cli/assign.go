package cli

import (
	"fmt"
	"strings"

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
}

func newAssignCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "assign",
		Short: "Assign a namespace or node to a control plane (cluster administrators)",
		Long: `Sets the label ` + cdv1beta1.ControlPlaneLabel + `=<id> on a namespace or node and, for a
namespace, creates the plane's RoleBindings in it. Refused, with the reason and with nothing
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
			if len(args) != 1 {
				return fmt.Errorf("want exactly one %s name, got %d arguments (usage: %s)", kind, len(args), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			t := lifecycle.Target{Kind: kind, Name: args[0]}
			// The id and the name are checked before the kubeconfig is read.
			if err := lifecycle.ValidateAssignment(f.id, t); err != nil {
				return refused(verb, err)
			}
			c, err := assignClient(f.kubeconfig)
			if err != nil {
				return err
			}
			var res *lifecycle.Result
			if unassign {
				res, err = lifecycle.Unassign(cmd.Context(), c, f.id, t, f.force)
			} else {
				res, err = lifecycle.Assign(cmd.Context(), c, f.id, t)
			}
			printResult(cmd, verb, t, f.id, res)
			return refused(verb, err)
		},
	}
	fs := cmd.Flags()
	plane.AddFlag(fs, &f.id)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
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

func printResult(cmd *cobra.Command, verb string, t lifecycle.Target, id string, res *lifecycle.Result) {
	if res == nil {
		return
	}
	w := cmd.OutOrStdout()
	for _, c := range res.Changes {
		fmt.Fprintln(w, c)
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

// assignClient builds a client from a kubeconfig: the given file, or the usual loading rules.
func assignClient(kubeconfig string) (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
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
