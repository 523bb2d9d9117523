package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"cdplane/internal/version"
)

// newVersionCommand prints the CLI's version, which is also the version of the charts it
// installs and of the image they run (internal/version).
func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this CLI, of the charts it installs and of the image they run",
		Example: `  cdplane version
  cdplane version -o json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "":
				fmt.Fprintln(cmd.OutOrStdout(), version.String("cdplane"))
			case "json":
				b, err := json.MarshalIndent(version.Get(), "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
			default:
				return fmt.Errorf("--output %q: must be json or empty", output)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json (default: one line)")
	return cmd
}
