//go:build !linux

package main

import (
	"net"
	"syscall"
)

func kernelStamps(net.Conn) syscall.RawConn { return nil }

func readStamped(syscall.RawConn, []byte) (int, int64, error) { panic("no kernel timestamps here") }
