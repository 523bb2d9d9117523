package imagebuild

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image describes the image's configuration.
type Image struct {
	// Name is the image's name in the archive's index and docker manifest, e.g.
	// "docker.io/library/cdplane:0.1.0" (what the chart's default "cdplane:<appVersion>" means).
	Name, Tag string
	Version   string
	Commit    string
	Arch      string
	Created   time.Time
	// Layers are gzip-compressed layer tars, base first.
	Layers []string
	// LayerComments say what made each layer, for its history.
	LayerComments []string
}

// newImage assembles the OCI image (OCI media types) from its layers and configuration.
func newImage(im Image) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: im.Created.UTC()}
	adds := make([]mutate.Addendum, 0, len(im.Layers))
	for i, p := range im.Layers {
		l, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{Created: created, CreatedBy: im.LayerComments[i]}})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created, cfg.OS, cfg.Architecture = created, "linux", im.Arch
	cfg.Config = v1.Config{
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=/" + caBundle,
		},
		// root by default: the kubelet plugin (privileged, host paths) and the IMEX daemons need
		// it; the chart runs the controller as nonroot (65532).
		User:       "0",
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "cdplane",
			"org.opencontainers.image.version":  im.Version,
			"org.opencontainers.image.revision": im.Commit,
		},
	}
	return mutate.ConfigFile(img, cfg)
}

// WriteArchive writes img as one tar that is both an OCI image layout (oci-layout, index.json,
// blobs/sha256/…: `ctr images import`, `kind load image-archive`, skopeo oci-archive:) and a
// docker-load archive (manifest.json naming the same blobs: `docker load`), as `docker save`
// writes since Docker 25. Entries are in a fixed order with fixed times: the same image gives
// the same bytes. It returns the manifest's digest, the image's digest.
func WriteArchive(path string, img v1.Image, name, tag string) (v1.Hash, error) {
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return v1.Hash{}, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return v1.Hash{}, err
	}
	index := v1.IndexManifest{
		SchemaVersion: 2, MediaType: types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1, Digest: digest, Size: int64(len(manifest)),
			Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
			Annotations: map[string]string{
				"io.containerd.image.name":          name,
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return v1.Hash{}, err
	}
	docker := []tarball.Descriptor{{Config: blobPath(cfgName), RepoTags: []string{dockerRef(name)}}}

	f, err := os.Create(path)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, size int64, body io.Reader) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		n, err := io.Copy(tw, body)
		if err == nil && n != size {
			err = fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
		}
		return err
	}
	addBytes := func(name string, b []byte) error { return add(name, int64(len(b)), bytesReader(b)) }

	if err := addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return v1.Hash{}, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "blobs/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
		return v1.Hash{}, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "blobs/sha256/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
		return v1.Hash{}, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		size, err := l.Size()
		if err != nil {
			return v1.Hash{}, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return v1.Hash{}, err
		}
		err = add(blobPath(d), size, rc)
		rc.Close()
		if err != nil {
			return v1.Hash{}, err
		}
		docker[0].Layers = append(docker[0].Layers, blobPath(d))
	}
	if err := addBytes(blobPath(cfgName), config); err != nil {
		return v1.Hash{}, err
	}
	if err := addBytes(blobPath(digest), manifest); err != nil {
		return v1.Hash{}, err
	}
	if err := addBytes("index.json", indexJSON); err != nil {
		return v1.Hash{}, err
	}
	dockerJSON, err := json.Marshal(docker)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := addBytes("manifest.json", dockerJSON); err != nil {
		return v1.Hash{}, err
	}
	if err := tw.Close(); err != nil {
		return v1.Hash{}, err
	}
	return digest, f.Close()
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// dockerRef is the short name docker shows for a docker.io/library image.
func dockerRef(name string) string {
	const library = "docker.io/library/"
	if len(name) > len(library) && name[:len(library)] == library {
		return name[len(library):]
	}
	return name
}
