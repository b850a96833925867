//go:build goexperiment.jsonv2

package decoders

import jsonv2 "encoding/json/v2"

// jsonV2 is encoding/json/v2 with its default options (which Go 1.26 builds
// only with GOEXPERIMENT=jsonv2; the experiment also reimplements
// encoding/json itself on top of v2, so the reference changes with it).
var jsonV2 = []Candidate{stateless("encoding/json/v2", "v2", func(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v)
})}
