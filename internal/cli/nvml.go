package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"cdplane/internal/nvml"
)

func newNVMLCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "nvml", Short: "NVML fabric discovery"}
	var backend, simFile string
	discover := &cobra.Command{
		Use:   "discover",
		Short: "Print this node's GPUs, their raw NVLink fabric state and the clique they derive",
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := nvml.Options{}
			if simFile != "" {
				data, err := os.ReadFile(simFile)
				if err != nil {
					return err
				}
				sim, err := nvml.ParseSim(data)
				if err != nil {
					return err
				}
				opts.Sim = &sim
			}
			d, err := nvml.New(backend, opts)
			if err != nil {
				return err
			}
			res, derr := d.Discover(cmd.Context())
			fmt.Fprint(cmd.OutOrStdout(), nvml.Describe(res, derr))
			if derr != nil {
				return derr
			}
			return nil
		},
	}
	discover.Flags().StringVar(&backend, "backend", nvml.BackendAuto, "nvml (real), sim, or auto (real when the NVML library loads)")
	discover.Flags().StringVar(&simFile, "sim", "", "JSON file with a simulated node's GPUs and fabric (backend sim)")
	cmd.AddCommand(discover)
	return cmd
}
