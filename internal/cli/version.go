package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"cdplane/internal/version"
)

// newVersionCommand prints the CLI's version, which is also the version of the charts it
// installs and of the image they run (internal/version).
func newVersionCommand() *cobra.Command {
	var output outputFlags
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this CLI, of the charts it installs and of the image they run",
		Example: `  cdplane version
  cdplane version -o json
  cdplane version -o jsonpath='{.version}'`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := output.printer()
			if err != nil {
				return usage(err)
			}
			if p == nil {
				fmt.Fprintln(cmd.OutOrStdout(), version.String("cdplane"))
				return nil
			}
			return p.PrintObj(newDocument(kindVersion, version.Get()), cmd.OutOrStdout())
		},
	}
	output.add(cmd)
	return cmd
}
