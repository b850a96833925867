package main

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelStamps asks the kernel to timestamp every segment this connection
// receives (SO_TIMESTAMPNS): for a loopback connection that is the moment
// the sending server's write put it in the socket, before anything in
// this process ran. It returns the raw connection to read through, or nil
// when the kernel does not stamp.
func kernelStamps(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return nil
	}
	return raw
}

// readStamped reads into b with recvmsg and returns the kernel's receive
// timestamp of the data (unix nanos; 0 when none came with it).
func readStamped(raw syscall.RawConn, b []byte) (n int, stamp int64, err error) {
	var oob [64]byte
	var oobn int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), b, oob[:], 0)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if n < 0 {
			n = 0
		}
		return n, 0, os.NewSyscallError("recvmsg", err)
	}
	if n == 0 && len(b) > 0 {
		return 0, 0, io.EOF
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			stamp = sec*1e9 + nsec
		}
	}
	return n, stamp, nil
}
