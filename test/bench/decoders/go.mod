module github.com/fleetwave/fleetwave/test/bench/decoders

go 1.26.0

replace github.com/fleetwave/fleetwave => ../../..

require (
	github.com/bytedance/sonic v1.15.5
	github.com/fleetwave/fleetwave v0.0.0
	github.com/goccy/go-json v0.12.0
	github.com/google/go-cmp v0.7.0
	github.com/json-iterator/go v1.1.12
	github.com/segmentio/encoding v0.5.4
	github.com/valyala/fastjson v1.6.10
)

require (
	github.com/bytedance/gopkg v0.1.3 // indirect
	github.com/bytedance/sonic/loader v0.5.3 // indirect
	github.com/cloudwego/base64x v0.1.6 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/klauspost/cpuid/v2 v2.2.9 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/twitchyliquid64/golang-asm v0.15.1 // indirect
	golang.org/x/arch v0.0.0-20210923205945-b76863e36670 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
