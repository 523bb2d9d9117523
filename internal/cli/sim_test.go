package cli

import "testing"

// TestSimJobValidation: sim job checks --plot before it reads the sim's state.
func TestSimJobValidation(t *testing.T) {
	runCases(t, map[string]cliCase{
		"plot: not svg": {args: []string{"sim", "job", "--plot", "out/plot.png", "--state-dir", "{missing}"}, code: 1,
			stderr: `--plot: cannot write the plot to out/plot.png: unsupported extension ".png", only .svg is supported`},
		"plot: no extension": {args: []string{"sim", "job", "--plot", "plot", "--state-dir", "{missing}"}, code: 1,
			stderr: `--plot: cannot write the plot to plot: unsupported extension "", only .svg is supported`},
		"plot: svg passes": {args: []string{"sim", "job", "--plot", "{dir}/plot.svg", "--state-dir", "{dir}"}, code: 1,
			stderr: "no simulated cluster in"},
	})
}
