package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strings"
)

// The users and groups of the image, as distroless has them: root, nobody and nonroot
// (65532), the uid the controller runs as.
const (
	passwd = `root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
`
	group = `root:x:0:
tty:x:5:
staff:x:50:
nobody:x:65534:
nonroot:x:65532:
`
	nsswitch = `passwd:         files
group:          files
shadow:         files
gshadow:        files
hosts:          files dns
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
`
	// NonrootUID is the uid (and gid) of user nonroot.
	NonrootUID = 65532
	// caBundle is where the image's CA bundle is generated, as update-ca-certificates would.
	caBundle = "etc/ssl/certs/ca-certificates.crt"
)

// baseFS is the base layer's tree: the files of the .debs, and what their maintainer scripts or
// a distroless image would add (users, groups, nsswitch.conf, the CA bundle, home and tmp, and
// the packages' control files under /var/lib/dpkg/status.d for scanners).
func baseFS(debs map[string]string, order []string, log io.Writer) (*FS, error) {
	fs := NewFS()
	for _, name := range order {
		if err := debFiles(debs[name], fs); err != nil {
			return nil, err
		}
		control, err := debControl(debs[name])
		if err != nil {
			return nil, err
		}
		if err := fs.File("var/lib/dpkg/status.d/"+name, 0o644, control); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		data string
	}{{"etc/passwd", passwd}, {"etc/group", group}, {"etc/nsswitch.conf", nsswitch}} {
		if err := fs.File(f.name, 0o644, []byte(f.data)); err != nil {
			return nil, err
		}
	}
	for _, d := range []struct {
		name     string
		mode     uint32
		uid, gid int
	}{{"root", 0o700, 0, 0}, {"home/nonroot", 0o700, NonrootUID, NonrootUID}, {"tmp", 0o777 | 0o1000, 0, 0}} {
		if err := fs.Dir(d.name, modeOf(d.mode), d.uid, d.gid); err != nil {
			return nil, err
		}
	}
	if bundle := caCertificates(fs); len(bundle) > 0 {
		if err := fs.File(caBundle, 0o644, bundle); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(log, "Base layer: %d entries from %s\n", len(fs.Names()), strings.Join(order, ", "))
	return fs, nil
}

// caCertificates concatenates the certificates ca-certificates ships (sorted by name), as its
// update-ca-certificates does for the default configuration; nil without the package.
func caCertificates(fs *FS) []byte {
	var b bytes.Buffer
	for _, n := range fs.Names() {
		e := fs.Get(n)
		if strings.HasPrefix(n, "usr/share/ca-certificates/") && strings.HasSuffix(n, ".crt") && e.Type == tar.TypeReg {
			b.Write(e.Data)
			if !bytes.HasSuffix(e.Data, []byte("\n")) {
				b.WriteByte('\n')
			}
		}
	}
	return b.Bytes()
}
