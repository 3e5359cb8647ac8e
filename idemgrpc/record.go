package idemgrpc

import (
	"errors"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// A recorded outcome is stored as the guard's result:
//
//	version byte (1)
//	kind    byte (kindReply or kindStatus)
//	message the rest: the reply as a google.protobuf.Any (its type URL names
//	        the method's reply type, so the replay unmarshals into it without
//	        a descriptor of the service), or the error as a google.rpc.Status
const (
	encodingV1 = 1
	kindReply  = 1
	kindStatus = 2
)

// recordOverhead is room beyond MaxResponseSize for the header bytes and the
// Any's type URL.
const recordOverhead = 4 << 10

var errCorrupt = errors.New("idemgrpc: corrupt recorded reply")

// errNotProto is returned when a covered method's request or reply is not a
// protobuf message (a custom codec): it cannot be fingerprinted or replayed.
var errNotProto = errors.New("idemgrpc: the message is not a proto.Message")

var marshal = proto.MarshalOptions{Deterministic: true}

func encodeReply(reply any) ([]byte, error) {
	m, ok := reply.(proto.Message)
	if !ok {
		return nil, errNotProto
	}
	a, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return marshal.MarshalAppend([]byte{encodingV1, kindReply}, a)
}

func encodeStatus(st *status.Status) ([]byte, error) {
	return marshal.MarshalAppend([]byte{encodingV1, kindStatus}, st.Proto())
}

// decode reverses encodeReply and encodeStatus: a reply of the type it was
// recorded as, or the recorded error as recorded; err when b cannot be read
// (or the reply's type is not linked into this binary any more).
func decode(b []byte) (reply any, recorded error, err error) {
	if len(b) < 2 || b[0] != encodingV1 {
		return nil, nil, errCorrupt
	}
	switch b[1] {
	case kindReply:
		var a anypb.Any
		if err := proto.Unmarshal(b[2:], &a); err != nil {
			return nil, nil, errCorrupt
		}
		m, err := a.UnmarshalNew()
		if err != nil {
			return nil, nil, err
		}
		return m, nil, nil
	case kindStatus:
		var sp spb.Status
		if err := proto.Unmarshal(b[2:], &sp); err != nil {
			return nil, nil, errCorrupt
		}
		return nil, status.FromProto(&sp).Err(), nil
	}
	return nil, nil, errCorrupt
}
