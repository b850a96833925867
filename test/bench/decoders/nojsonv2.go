//go:build !goexperiment.jsonv2

package decoders

// jsonV2 is empty: encoding/json/v2 needs GOEXPERIMENT=jsonv2 in Go 1.26.
var jsonV2 []Candidate
