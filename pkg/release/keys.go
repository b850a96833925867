package release

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// Keys are Ed25519, one per file, so that each can be held by a different
// person: the private key as PEM PKCS#8 (mode 0600), the public key beside
// it in NAME.pub as PEM PKIX. Both are what openssl reads.

// Signer is a private key loaded from a file.
type Signer struct {
	// ID is the TUF key id (the hash of the public key's canonical form).
	ID   string
	Key  *metadata.Key
	Path string
	s    signature.Signer
}

// Sign returns s as go-tuf's metadata.Sign takes it (for tools and tests
// that sign metadata themselves).
func (s *Signer) Sign() signature.Signer { return s.s }

// GenerateKey writes a new key to path (and path+".pub") and returns its id.
// It refuses to overwrite a file.
func GenerateKey(path string) (string, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	for _, f := range []string{path, path + ".pub"} {
		if _, err := os.Lstat(f); err == nil {
			return "", fmt.Errorf("%s exists: a key file is never overwritten", f)
		}
	}
	if err := writeNew(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", err
	}
	if err := writeNew(path+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		os.Remove(path)
		return "", err
	}
	k, err := metadata.KeyFromPublicKey(pub)
	if err != nil {
		return "", err
	}
	return k.ID()
}

func writeNew(name string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
	}
	return err
}

// LoadSigner reads a private key file.
func LoadSigner(path string) (*Signer, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM private key (want one written by 'fleetctl repo keygen')", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, want an Ed25519 key", path, k)
	}
	s, err := signature.LoadSigner(priv, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	mk, err := metadata.KeyFromPublicKey(priv.Public())
	if err != nil {
		return nil, err
	}
	id, err := mk.ID()
	if err != nil {
		return nil, err
	}
	return &Signer{ID: id, Key: mk, Path: path, s: s}, nil
}

// LoadPublicKey reads a public key file (NAME.pub), or the public half of
// a private key file.
func LoadPublicKey(path string) (*metadata.Key, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk != nil && blk.Type == "PRIVATE KEY" {
		s, err := LoadSigner(path)
		if err != nil {
			return nil, err
		}
		return s.Key, nil
	}
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%s: not a PEM public key", path)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, want an Ed25519 key", path, k)
	}
	return metadata.KeyFromPublicKey(pub)
}

func readBounded(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > 16<<10 {
		return nil, errors.New(path + ": too large for a key file")
	}
	return os.ReadFile(path)
}

// ShortID is the first 12 hex digits of a key id: enough to tell keys
// apart in a message (the full id is in -o json and in root.json).
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// KeyID is k's TUF key id.
func KeyID(k *metadata.Key) string {
	id, err := k.ID()
	if err != nil {
		return ""
	}
	return id
}

// LoadRoleKeys reads the public key files of one role (NAME.pub, or a
// private key file's public half) and the threshold of them that must
// sign: e.g. three root keys, 2 of which sign.
func LoadRoleKeys(files []string, threshold int) (RoleKeys, error) {
	rk := RoleKeys{Threshold: threshold}
	seen := map[string]string{}
	for _, f := range files {
		k, err := LoadPublicKey(f)
		if err != nil {
			return RoleKeys{}, err
		}
		id := KeyID(k)
		if prev, ok := seen[id]; ok {
			return RoleKeys{}, fmt.Errorf("%s and %s are the same key (%s): each signer needs a key of their own", prev, f, ShortID(id))
		}
		seen[id] = f
		rk.Keys = append(rk.Keys, k)
	}
	if len(rk.Keys) == 0 {
		return RoleKeys{}, errors.New("no key file")
	}
	if threshold < 1 || threshold > len(rk.Keys) {
		return RoleKeys{}, fmt.Errorf("threshold %d with %d keys: want 1-%d", threshold, len(rk.Keys), len(rk.Keys))
	}
	return rk, nil
}

// KeyFiles are the key files GenerateRoleKeys writes into a directory,
// one per role: DIR/<role>.key and DIR/<role>.key.pub.
func KeyFiles(dir string) map[string]string {
	out := map[string]string{}
	for _, role := range Roles {
		out[role] = filepath.Join(dir, role+".key")
	}
	return out
}

// GenerateRoleKeys writes one new key per role into dir (KeyFiles), for a
// repository one person keeps: it refuses, writing nothing, when any of
// the files exists.
func GenerateRoleKeys(dir string) (map[string]*Signer, error) {
	files := KeyFiles(dir)
	for _, role := range Roles {
		for _, f := range []string{files[role], files[role] + ".pub"} {
			if _, err := os.Lstat(f); err == nil {
				return nil, fmt.Errorf("%s exists: a key file is never overwritten (give another directory)", f)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	out := map[string]*Signer{}
	for _, role := range Roles {
		if _, err := GenerateKey(files[role]); err != nil {
			return nil, err
		}
		s, err := LoadSigner(files[role])
		if err != nil {
			return nil, err
		}
		out[role] = s
	}
	return out, nil
}
