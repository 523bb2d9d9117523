package nvmlsim

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/imex"
	"cdplane/internal/nvml"
)

// confError is a malformed spec, at a line (one past the last at the end of the file), as the
// library reports it on stderr ("nvml-sim: <path>:<line>: <what>").
type confError struct {
	Line int
	What string
}

func (e *confError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.What) }

// parseConf is the Go twin of the library's parser (libnvml/nvml_sim.c, which states the
// format): it accepts exactly the files the library accepts, fails on the same line, and reads
// the same readings. The tests hold the two to that (FuzzConf), and RenderConf to writing what
// it reads back.
func parseConf(data []byte) (conf, error) {
	const (
		header = iota
		driver
		gpus
		gpu
	)
	var c conf
	state, count, line := header, 0, 0
	fail := func(format string, args ...any) (conf, error) {
		return conf{}, &confError{Line: line, What: fmt.Sprintf(format, args...)}
	}
	for rest := data; len(rest) > 0; {
		line++
		end := bytes.IndexByte(rest, '\n')
		if end < 0 {
			return fail("no newline at the end of the file")
		}
		l := rest[:end]
		rest = rest[end+1:]
		switch {
		case bytes.IndexByte(l, 0) >= 0:
			return fail("NUL byte")
		case len(l) > maxConfLine:
			return fail("line longer than %d bytes", maxConfLine)
		case len(l) == 0 || l[0] == '#':
			continue
		}
		for _, b := range l {
			if b != ' ' && (b < 0x21 || b > 0x7e) {
				return fail("byte %#02x: fields are printable ASCII", b)
			}
		}
		f := strings.Split(string(l), " ")
		for _, field := range f {
			if field == "" {
				return fail("fields must be separated by single spaces, with none at either end")
			}
		}
		if len(f) > 8 {
			return fail("more than 8 fields")
		}
		switch state {
		case header:
			if len(f) != 2 || f[0] != "nvml-sim" || f[1] != "1" {
				return fail(`want "nvml-sim 1" first`)
			}
			state = driver
		case driver:
			if len(f) != 2 || f[0] != "driver" || len(f[1]) >= 80 || !imex.IsDottedVersion(f[1]) {
				return fail(`want "driver <version>"`)
			}
			c.Driver, state = f[1], gpus
		case gpus:
			if len(f) == 1 && f[0] == "unavailable" {
				if c.Unavailable {
					return fail("unavailable twice")
				}
				c.Unavailable = true
				continue
			}
			n, ok := confNumber(f, 1, MaxGPUs)
			if len(f) != 2 || f[0] != "gpus" || !ok {
				return fail(`want "unavailable" or "gpus <n>"`)
			}
			count, state = int(n), gpu
			c.GPUs = make([]nvml.GPU, 0, count)
		case gpu:
			g, err := confGPU(f, len(c.GPUs), count)
			if err != nil {
				return fail("%v", err)
			}
			c.GPUs = append(c.GPUs, g)
		}
	}
	line++
	if state != gpu {
		return fail(`end of file before "gpus <n>"`)
	}
	if len(c.GPUs) != count {
		return fail("end of file after %d of the %d GPUs", len(c.GPUs), count)
	}
	return c, nil
}

// confGPU reads the fields of a gpu directive, GPU next of count.
func confGPU(f []string, next, count int) (nvml.GPU, error) {
	if next == count {
		return nvml.GPU{}, fmt.Errorf("%s after the last of the %d GPUs", f[0], count)
	}
	if i, ok := confNumber(f, 1, MaxGPUs); f[0] != "gpu" || len(f) < 4 || !ok || int(i) != next {
		return nvml.GPU{}, fmt.Errorf(`want "gpu %d <uuid> <fabric>"`, next)
	}
	g := nvml.GPU{Index: next, UUID: f[2]}
	if _, ok := confUUID(strings.TrimPrefix(f[2], "GPU-")); !strings.HasPrefix(f[2], "GPU-") || !ok {
		return g, fmt.Errorf("GPU %d: bad UUID %s", next, f[2])
	}
	switch {
	case f[3] == "nofabric" && len(f) == 4:
		return g, nil
	case f[3] != "fabric" || len(f) != 8:
		return g, fmt.Errorf("GPU %d: want nofabric or fabric <state> <status> <clusterUUID> <cliqueId>", next)
	}
	g.Fabric.Supported = true
	state, okState := confState(f[4])
	status, okStatus := confNumber(f, 5, 1<<32-1)
	cluster, okCluster := confUUID(f[6])
	clique, okClique := confNumber(f, 7, 1<<32-1)
	if !okState || !okStatus || !okCluster || !okClique {
		return g, fmt.Errorf("GPU %d: bad fabric reading", next)
	}
	g.Fabric.State, g.Fabric.Status, g.Fabric.ClusterUUID, g.Fabric.CliqueID = state, nvml.FabricStatus(status), cluster, uint32(clique)
	return g, nil
}

// confNumber reads f[i] as a decimal number without sign or leading zero, at most limit.
func confNumber(f []string, i int, limit uint64) (uint64, bool) {
	if i >= len(f) {
		return 0, false
	}
	s := f[i]
	if s == "" || len(s) > 10 || (len(s) > 1 && s[0] == '0') || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil && v <= limit
}

func confState(s string) (nvml.FabricState, bool) {
	for st := range nvml.FabricState(4) {
		if st.String() == s {
			return st, true
		}
	}
	v, ok := confNumber([]string{s}, 0, 255)
	return nvml.FabricState(v), ok
}

// confUUID reads a canonical UUID in lower case.
func confUUID(s string) ([16]byte, bool) {
	if strings.ToLower(s) != s {
		return [16]byte{}, false
	}
	u, err := nvml.ParseUUID(s)
	return u, err == nil
}

// withRaw is a spec whose GPU 1 reports raw as its fabric reading.
func withRaw(raw Fabric) Node {
	s := Rack(0, "node-a")
	s.PerGPU = map[int]Fabric{1: raw}
	return s
}

// RenderConf writes the readings Discover makes of a spec, and the spec's driver and
// availability, in a form the library's parser (and its twin) reads back.
func TestRenderConf(t *testing.T) {
	specs := map[string]Node{
		"rack node":       Rack(0, "node-a"),
		"unavailable":     func() Node { s := Rack(1, "n"); s.Unavailable = true; return s }(),
		"no GPUs":         {Node: "n", DriverVersion: "565.57.01"},
		"no fabric":       {Node: "n", GPUs: 2, Fabric: Fabric{NoFabric: true}},
		"unknown state":   withRaw(Fabric{State: 7, Status: 999, CliqueID: 1<<32 - 1}),
		"state 0 read":    withRaw(Fabric{}),
		"mixed":           withRaw(Fabric{NoFabric: true}),
		"every GPU":       {Node: "big", GPUs: MaxGPUs},
		"odd node name":   {Node: "a b\n\"c\"", GPUs: 1},
		"long node name":  {Node: strings.Repeat("n", 300), GPUs: 1},
		"no node, no GPU": {},
	}
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			data, err := RenderConf(s)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseConf(data)
			if err != nil {
				t.Fatalf("reading back %q: %v", data, err)
			}
			want := conf{Driver: s.Driver(), Unavailable: s.Unavailable, GPUs: s.readings()}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("read back (-want +got):\n%s\nfrom:\n%s", diff, data)
			}
		})
	}
}

func TestRenderConfText(t *testing.T) {
	s := Rack(0, "node-a")
	s.GPUs = 2
	s.PerGPU = map[int]Fabric{1: {NoFabric: true}}
	data, err := RenderConf(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `# Simulated NVML of node "node-a" (nvmlsim.RenderConf), read at every nvmlInit.
nvml-sim 1
driver ` + DefaultDriverVersion + `
gpus 2
gpu 0 ` + nodeAGPU0UUID + ` fabric COMPLETED 0 ` + rack0ClusterUUID + ` 1
gpu 1 ` + nodeAGPU1UUID + ` nofabric
`
	if diff := cmp.Diff(want, string(data)); diff != "" {
		t.Errorf("RenderConf (-want +got):\n%s", diff)
	}
}

func TestRenderConfRefusesInvalidSpecs(t *testing.T) {
	for name, s := range map[string]Node{
		"too many GPUs": {Node: "n", GPUs: MaxGPUs + 1},
		"no node name":  {GPUs: 1},
		"bad driver":    {Node: "n", DriverVersion: "580"},
	} {
		if data, err := RenderConf(s); err == nil {
			t.Errorf("%s: rendered %q", name, data)
		}
	}
}

// Malformed specs are refused at the line at fault; these are also FuzzConf's seeds, which hold
// the library to the same.
var malformedConfs = map[string]struct {
	conf string
	line int
}{
	"empty file":              {"", 1},
	"comments only":           {"# a\n\n", 3},
	"no newline at the end":   {"nvml-sim 1\ndriver 1.2\ngpus 0", 3},
	"other format version":    {"nvml-sim 2\n", 1},
	"header not first":        {"driver 1.2\n", 1},
	"driver missing":          {"nvml-sim 1\ngpus 0\n", 2},
	"driver not dotted":       {"nvml-sim 1\ndriver 580\ngpus 0\n", 2},
	"driver empty part":       {"nvml-sim 1\ndriver 580..1\ngpus 0\n", 2},
	"driver too long":         {"nvml-sim 1\ndriver 1." + strings.Repeat("1", 78) + "\ngpus 0\n", 2},
	"unavailable twice":       {"nvml-sim 1\ndriver 1.2\nunavailable\nunavailable\ngpus 0\n", 4},
	"unavailable late":        {"nvml-sim 1\ndriver 1.2\ngpus 0\nunavailable\n", 4},
	"too many GPUs":           {"nvml-sim 1\ndriver 1.2\ngpus 65\n", 3},
	"leading zero":            {"nvml-sim 1\ndriver 1.2\ngpus 01\ngpu 0 " + nodeAGPU0UUID + " nofabric\n", 3},
	"GPU missing":             {"nvml-sim 1\ndriver 1.2\ngpus 1\n", 4},
	"GPU out of order":        {"nvml-sim 1\ndriver 1.2\ngpus 2\ngpu 1 " + nodeAGPU0UUID + " nofabric\n", 4},
	"GPU too many":            {"nvml-sim 1\ndriver 1.2\ngpus 0\ngpu 0 " + nodeAGPU0UUID + " nofabric\n", 4},
	"GPU UUID upper case":     {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + strings.ToUpper(nodeAGPU0UUID) + " nofabric\n", 4},
	"GPU UUID without prefix": {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + rack0ClusterUUID + " nofabric\n", 4},
	"nofabric and more":       {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " nofabric 1\n", 4},
	"fabric short":            {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " fabric COMPLETED 0 " + rack0ClusterUUID + "\n", 4},
	"state unknown name":      {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " fabric DONE 0 " + rack0ClusterUUID + " 1\n", 4},
	"state lower case":        {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " fabric completed 0 " + rack0ClusterUUID + " 1\n", 4},
	"state 256":               {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " fabric 256 0 " + rack0ClusterUUID + " 1\n", 4},
	"status over 32 bits":     {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " fabric COMPLETED 4294967296 " + rack0ClusterUUID + " 1\n", 4},
	"clique negative":         {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " fabric COMPLETED 0 " + rack0ClusterUUID + " -1\n", 4},
	"cluster UUID short":      {"nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " fabric COMPLETED 0 7ff2eff4 1\n", 4},
	"double space":            {"nvml-sim  1\n", 1},
	"trailing space":          {"nvml-sim 1 \n", 1},
	"leading space":           {" nvml-sim 1\n", 1},
	"tab":                     {"nvml-sim\t1\n", 1},
	"CRLF":                    {"nvml-sim 1\r\n", 1},
	"NUL in a comment":        {"nvml-sim 1\n# a\x00b\n", 2},
	"non-ASCII":               {"nvml-sim 1\ndriver 1.2\u00a0\n", 2},
	"line too long":           {"#" + strings.Repeat("x", maxConfLine) + "\n", 1},
	"nine fields":             {"nvml-sim 1 2 3 4 5 6 7 8\n", 1},
}

func TestParseConfRefuses(t *testing.T) {
	for name, tc := range malformedConfs {
		_, err := parseConf([]byte(tc.conf))
		var ce *confError
		if !errors.As(err, &ce) || ce.Line != tc.line {
			t.Errorf("%s: %v, want an error at line %d", name, err, tc.line)
		}
	}
}

// libraryCheck, set where cgo builds the library, holds the library to parseConf's verdict on
// data: the same GPUs, or a failed init naming the same line.
var libraryCheck func(t *testing.T, data []byte, c conf, err error)

// FuzzConf: what parseConf reads, rendered again, reads the same; and the library agrees with
// parseConf on every input (libraryCheck).
func FuzzConf(f *testing.F) {
	for _, s := range []Node{
		Rack(0, "node-a"),
		withRaw(Fabric{State: 7, Status: 999, CliqueID: 1<<32 - 1}),
		withRaw(Fabric{NoFabric: true}),
		{Node: "n", Unavailable: true, DriverVersion: "565.57.01"},
	} {
		data, err := RenderConf(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("nvml-sim 1\ndriver 1.2\ngpus 1\ngpu 0 " + nodeAGPU0UUID + " fabric 3 4294967295 " + rack0ClusterUUID + " 0\n"))
	for _, tc := range malformedConfs {
		f.Add([]byte(tc.conf))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseConf(data)
		if err == nil {
			again, err := parseConf(c.render())
			if err != nil {
				t.Fatalf("reading %q back: %v", c.render(), err)
			}
			if diff := cmp.Diff(c, again); diff != "" {
				t.Fatalf("read back (-first +again):\n%s", diff)
			}
		}
		if libraryCheck != nil {
			libraryCheck(t, data, c, err)
		}
	})
}
