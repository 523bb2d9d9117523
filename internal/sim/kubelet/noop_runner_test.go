package kubelet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNoopRecord(t *testing.T) {
	spec := &ContainerSpec{
		Command: []string{"/bin/app"}, Args: []string{"--x=/h/data", "y"},
		Env:     []EnvVar{{Name: "B", Value: "2"}, {Name: "A", Value: "1"}},
		Devices: []Device{{ContainerPath: "/dev/c0", HostPath: "/n/dev/c0"}},
		Mounts:  []Mount{{ContainerPath: "/data", HostPath: "/h/data"}},
	}
	want := "ARGS /bin/app --x=/h/data y\nENV A=1\nENV B=2\nDEVICE /dev/c0 /n/dev/c0\nMOUNT /data /h/data\n"
	if diff := cmp.Diff(want, NoopRecord(spec)); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

func TestNoopBehaviour(t *testing.T) {
	for name, tc := range map[string]struct {
		ann      map[string]string
		init     bool
		wantFor  time.Duration
		wantCode int
		wantErr  bool
	}{
		"until stopped":      {wantFor: -1},
		"init exits at once": {init: true},
		"run for":            {ann: map[string]string{AnnotationRunFor: "20s"}, wantFor: 20 * time.Second},
		"exit code":          {ann: map[string]string{AnnotationExitCode: "3"}, wantCode: 3},
		"both":               {ann: map[string]string{AnnotationExitCode: "1", AnnotationRunFor: "1s"}, wantFor: time.Second, wantCode: 1},
		"init runs for":      {ann: map[string]string{AnnotationRunFor: "2s"}, init: true, wantFor: 2 * time.Second},
		"bad duration":       {ann: map[string]string{AnnotationRunFor: "soon"}, wantErr: true},
		"bad code":           {ann: map[string]string{AnnotationExitCode: "300"}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			d, code, err := noopBehaviour(tc.ann, tc.init)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (d != tc.wantFor || code != tc.wantCode) {
				t.Errorf("run for %s, exit %d; want %s, %d", d, code, tc.wantFor, tc.wantCode)
			}
		})
	}
}
