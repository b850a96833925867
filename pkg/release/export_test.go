package release

import "github.com/theupdateframework/go-tuf/v2/metadata"

// SignWith signs md with s's key, bypassing every check of Repo.Sign: how
// the tests forge what a holder of a revoked key could serve.
func SignWith[T metadata.Roles](md *metadata.Metadata[T], s *Signer) error {
	_, err := md.Sign(s.s)
	return err
}
