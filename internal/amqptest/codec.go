package amqptest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// The AMQP 1.0 type system (OASIS AMQP 1.0, part 1 "Types"): every value
// is a constructor byte followed by its data; a described value is 0x00,
// a descriptor and the value. Decoding keeps enough of each value's type
// to encode it back as it came (symbols stay symbols, arrays stay arrays),
// so that sections the server passes through reach the receiver unchanged.

// Symbol is an AMQP symbol (ASCII, used for names and annotation keys).
type Symbol string

// UUID is an AMQP uuid (RFC 4122 byte order).
type UUID [16]byte

// Described is a described value; the descriptor is a uint64 code or a
// Symbol.
type Described struct {
	Desc  any
	Value any
}

// Array is an AMQP array: elements of one type.
type Array []any

// Map is an AMQP map in wire order (keys of any type).
type Map []KV

// KV is one entry of a Map.
type KV struct{ K, V any }

// Get returns the value under a string or symbol key named name.
func (m Map) Get(name string) (any, bool) {
	for _, e := range m {
		switch k := e.K.(type) {
		case string:
			if k == name {
				return e.V, true
			}
		case Symbol:
			if string(k) == name {
				return e.V, true
			}
		}
	}
	return nil, false
}

// Set replaces or appends the entry under key (matched as Get does).
func (m Map) Set(key, v any) Map {
	name := fmt.Sprint(key)
	for i, e := range m {
		switch k := e.K.(type) {
		case string, Symbol:
			if fmt.Sprint(k) == name {
				m[i].V = v
				return m
			}
		}
	}
	return append(m, KV{key, v})
}

// Raw is an already encoded value, written out as it is (types the server
// never looks into: decimals, chars).
type Raw []byte

var errShort = errors.New("amqp: truncated value")

// Decoder reads AMQP values from a byte slice, one after another.
type Decoder struct {
	b []byte
	i int
}

// NewDecoder returns a decoder of b from its start.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Offset is how many bytes the values decoded so far took.
func (d *Decoder) Offset() int { return d.i }

// More reports whether bytes are left to decode.
func (d *Decoder) More() bool { return d.i < len(d.b) }

func (d *Decoder) need(n int) error {
	if n < 0 || d.i+n > len(d.b) {
		return errShort
	}
	return nil
}

func (d *Decoder) byte1() (byte, error) {
	if err := d.need(1); err != nil {
		return 0, err
	}
	d.i++
	return d.b[d.i-1], nil
}

func (d *Decoder) take(n int) ([]byte, error) {
	if err := d.need(n); err != nil {
		return nil, err
	}
	d.i += n
	return d.b[d.i-n : d.i], nil
}

func (d *Decoder) u32() (uint32, error) {
	b, err := d.take(4)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b), nil
}

func (d *Decoder) u64() (uint64, error) {
	b, err := d.take(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

// Value decodes the next value.
func (d *Decoder) Value() (any, error) {
	start := d.i
	c, err := d.byte1()
	if err != nil {
		return nil, err
	}
	if c == 0x00 {
		desc, err := d.Value()
		if err != nil {
			return nil, err
		}
		v, err := d.Value()
		if err != nil {
			return nil, err
		}
		return Described{Desc: desc, Value: v}, nil
	}
	v, err := d.body(c)
	if _, ok := v.(Raw); ok && err == nil {
		return Raw(append([]byte(nil), d.b[start:d.i]...)), nil
	}
	return v, err
}

// body decodes the data of a value whose constructor is c.
func (d *Decoder) body(c byte) (any, error) {
	switch c {
	case 0x40:
		return nil, nil
	case 0x41:
		return true, nil
	case 0x42:
		return false, nil
	case 0x56:
		b, err := d.byte1()
		return b != 0, err
	case 0x43:
		return uint32(0), nil
	case 0x44:
		return uint64(0), nil
	case 0x50:
		return d.byte1()
	case 0x51:
		b, err := d.byte1()
		return int8(b), err
	case 0x52:
		b, err := d.byte1()
		return uint32(b), err
	case 0x53:
		b, err := d.byte1()
		return uint64(b), err
	case 0x54:
		b, err := d.byte1()
		return int32(int8(b)), err
	case 0x55:
		b, err := d.byte1()
		return int64(int8(b)), err
	case 0x60:
		b, err := d.take(2)
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.Uint16(b), nil
	case 0x61:
		b, err := d.take(2)
		if err != nil {
			return nil, err
		}
		return int16(binary.BigEndian.Uint16(b)), nil
	case 0x70:
		return d.u32()
	case 0x71:
		v, err := d.u32()
		return int32(v), err
	case 0x72:
		v, err := d.u32()
		return math.Float32frombits(v), err
	case 0x73, 0x74:
		_, err := d.take(4)
		return Raw(nil), err
	case 0x80:
		return d.u64()
	case 0x81:
		v, err := d.u64()
		return int64(v), err
	case 0x82:
		v, err := d.u64()
		return math.Float64frombits(v), err
	case 0x83:
		v, err := d.u64()
		return time.UnixMilli(int64(v)).UTC(), err
	case 0x84:
		_, err := d.take(8)
		return Raw(nil), err
	case 0x94:
		_, err := d.take(16)
		return Raw(nil), err
	case 0x98:
		b, err := d.take(16)
		if err != nil {
			return nil, err
		}
		return UUID(b), nil
	case 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3:
		var n int
		if c&0xf0 == 0xa0 {
			b, err := d.byte1()
			if err != nil {
				return nil, err
			}
			n = int(b)
		} else {
			v, err := d.u32()
			if err != nil {
				return nil, err
			}
			n = int(v)
		}
		b, err := d.take(n)
		if err != nil {
			return nil, err
		}
		switch c & 0x0f {
		case 0x0:
			return append([]byte(nil), b...), nil
		case 0x1:
			return string(b), nil
		default:
			return Symbol(b), nil
		}
	case 0x45:
		return []any(nil), nil
	case 0xc0, 0xd0, 0xc1, 0xd1:
		var size, count int
		if c&0xf0 == 0xc0 {
			b, err := d.take(2)
			if err != nil {
				return nil, err
			}
			size, count = int(b[0]), int(b[1])
		} else {
			s, err := d.u32()
			if err != nil {
				return nil, err
			}
			if err := d.need(4); err != nil {
				return nil, err
			}
			n, _ := d.u32()
			size, count = int(s), int(n)
		}
		if count > len(d.b)-d.i || size > len(d.b) {
			return nil, errShort
		}
		if c&0x0f == 0x0 {
			l := make([]any, 0, count)
			for range count {
				v, err := d.Value()
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			return l, nil
		}
		m := make(Map, 0, count/2)
		for range count / 2 {
			k, err := d.Value()
			if err != nil {
				return nil, err
			}
			v, err := d.Value()
			if err != nil {
				return nil, err
			}
			m = append(m, KV{k, v})
		}
		return m, nil
	case 0xe0, 0xf0:
		var count int
		if c == 0xe0 {
			b, err := d.take(2)
			if err != nil {
				return nil, err
			}
			count = int(b[1])
		} else {
			if _, err := d.u32(); err != nil {
				return nil, err
			}
			n, err := d.u32()
			if err != nil {
				return nil, err
			}
			count = int(n)
		}
		if count > len(d.b)-d.i {
			return nil, errShort
		}
		ec, err := d.byte1()
		if err != nil {
			return nil, err
		}
		var desc any
		if ec == 0x00 {
			if desc, err = d.Value(); err != nil {
				return nil, err
			}
			if ec, err = d.byte1(); err != nil {
				return nil, err
			}
		}
		a := make(Array, 0, count)
		for range count {
			v, err := d.body(ec)
			if err != nil {
				return nil, err
			}
			if desc != nil {
				v = Described{Desc: desc, Value: v}
			}
			a = append(a, v)
		}
		return a, nil
	}
	return nil, fmt.Errorf("amqp: unknown constructor 0x%02x", c)
}

// Encoder appends AMQP encodings to b.
type Encoder struct{ b []byte }

// Bytes returns what was encoded so far.
func (e *Encoder) Bytes() []byte { return e.b }

// Append appends b, already encoded, as it is.
func (e *Encoder) Append(b []byte) { e.b = append(e.b, b...) }

// Encode returns the encodings of vs, one after another.
func Encode(vs ...any) []byte {
	var e Encoder
	for _, v := range vs {
		e.Value(v)
	}
	return e.b
}

func (e *Encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *Encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

// Value appends v, choosing the smallest encoding of its type.
func (e *Encoder) Value(v any) {
	switch v := v.(type) {
	case nil:
		e.b = append(e.b, 0x40)
	case bool:
		if v {
			e.b = append(e.b, 0x41)
		} else {
			e.b = append(e.b, 0x42)
		}
	case uint8:
		e.b = append(e.b, 0x50, v)
	case uint16:
		e.b = append(e.b, 0x60)
		e.b = binary.BigEndian.AppendUint16(e.b, v)
	case uint32:
		switch {
		case v == 0:
			e.b = append(e.b, 0x43)
		case v < 256:
			e.b = append(e.b, 0x52, byte(v))
		default:
			e.b = append(e.b, 0x70)
			e.u32(v)
		}
	case uint64:
		switch {
		case v == 0:
			e.b = append(e.b, 0x44)
		case v < 256:
			e.b = append(e.b, 0x53, byte(v))
		default:
			e.b = append(e.b, 0x80)
			e.u64(v)
		}
	case int8:
		e.b = append(e.b, 0x51, byte(v))
	case int16:
		e.b = append(e.b, 0x61)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(v))
	case int32:
		if v >= -128 && v <= 127 {
			e.b = append(e.b, 0x54, byte(int8(v)))
		} else {
			e.b = append(e.b, 0x71)
			e.u32(uint32(v))
		}
	case int:
		e.Value(int64(v))
	case int64:
		if v >= -128 && v <= 127 {
			e.b = append(e.b, 0x55, byte(int8(v)))
		} else {
			e.b = append(e.b, 0x81)
			e.u64(uint64(v))
		}
	case float32:
		e.b = append(e.b, 0x72)
		e.u32(math.Float32bits(v))
	case float64:
		e.b = append(e.b, 0x82)
		e.u64(math.Float64bits(v))
	case time.Time:
		e.b = append(e.b, 0x83)
		e.u64(uint64(v.UnixMilli()))
	case UUID:
		e.b = append(e.b, 0x98)
		e.b = append(e.b, v[:]...)
	case []byte:
		e.variable(0xa0, 0xb0, v)
	case string:
		e.variable(0xa1, 0xb1, []byte(v))
	case Symbol:
		e.variable(0xa3, 0xb3, []byte(v))
	case Raw:
		e.b = append(e.b, v...)
	case Described:
		e.b = append(e.b, 0x00)
		e.Value(v.Desc)
		e.Value(v.Value)
	case []any:
		if len(v) == 0 {
			e.b = append(e.b, 0x45)
			return
		}
		e.compound(0xd0, len(v), func() {
			for _, x := range v {
				e.Value(x)
			}
		})
	case Map:
		e.compound(0xd1, 2*len(v), func() {
			for _, x := range v {
				e.Value(x.K)
				e.Value(x.V)
			}
		})
	case map[string]any:
		m := make(Map, 0, len(v))
		for k, x := range v {
			m = append(m, KV{k, x})
		}
		e.Value(m)
	case Array:
		e.array(v)
	default:
		panic(fmt.Sprintf("amqptest: cannot encode %T", v))
	}
}

func (e *Encoder) variable(short, long byte, b []byte) {
	if len(b) < 256 {
		e.b = append(e.b, short, byte(len(b)))
	} else {
		e.b = append(e.b, long)
		e.u32(uint32(len(b)))
	}
	e.b = append(e.b, b...)
}

// compound writes a list32 or map32: size, count, then the elements.
func (e *Encoder) compound(c byte, count int, elems func()) {
	e.b = append(e.b, c)
	at := len(e.b)
	e.u32(0)
	e.u32(uint32(count))
	elems()
	binary.BigEndian.PutUint32(e.b[at:], uint32(len(e.b)-at-4))
}

// Array writes an array32 whose element constructor is that of the first
// element, in its wide form (so every element fits).
func (e *Encoder) array(a Array) {
	e.b = append(e.b, 0xf0)
	at := len(e.b)
	e.u32(0)
	e.u32(uint32(len(a)))
	if len(a) == 0 {
		e.b = append(e.b, 0x40)
	} else {
		switch a[0].(type) {
		case Symbol:
			e.b = append(e.b, 0xb3)
			for _, x := range a {
				s, _ := x.(Symbol)
				e.u32(uint32(len(s)))
				e.b = append(e.b, s...)
			}
		case UUID:
			e.b = append(e.b, 0x98)
			for _, x := range a {
				u, _ := x.(UUID)
				e.b = append(e.b, u[:]...)
			}
		case time.Time:
			e.b = append(e.b, 0x83)
			for _, x := range a {
				t, _ := x.(time.Time)
				e.u64(uint64(t.UnixMilli()))
			}
		case string:
			e.b = append(e.b, 0xb1)
			for _, x := range a {
				s, _ := x.(string)
				e.u32(uint32(len(s)))
				e.b = append(e.b, s...)
			}
		case int64:
			e.b = append(e.b, 0x81)
			for _, x := range a {
				n, _ := x.(int64)
				e.u64(uint64(n))
			}
		default:
			panic(fmt.Sprintf("amqptest: cannot encode an Array of %T", a[0]))
		}
	}
	binary.BigEndian.PutUint32(e.b[at:], uint32(len(e.b)-at-4))
}

// Perf encodes a performative or section: the descriptor code and a list
// of its fields, trailing nulls left out.
func Perf(code uint64, fields ...any) Described {
	for len(fields) > 0 && fields[len(fields)-1] == nil {
		fields = fields[:len(fields)-1]
	}
	return Described{Desc: code, Value: fields}
}

// Field returns the i-th field of a decoded list (nil past its end).
func Field(l []any, i int) any {
	if i < len(l) {
		return l[i]
	}
	return nil
}

// AsUint is v as an unsigned integer, whatever integer type it came as
// (0 when it is none).
func AsUint(v any) uint64 {
	switch n := v.(type) {
	case uint8:
		return uint64(n)
	case uint16:
		return uint64(n)
	case uint32:
		return uint64(n)
	case uint64:
		return n
	case int32:
		return uint64(n)
	case int64:
		return uint64(n)
	}
	return 0
}

// AsString is v when it is a string or a symbol, else "".
func AsString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case Symbol:
		return string(s)
	}
	return ""
}

// AsBool is v when it is a bool, else false.
func AsBool(v any) bool { b, _ := v.(bool); return b }

// DescCode returns the numeric descriptor of v (0 when v is not a
// described value with a numeric descriptor).
func DescCode(v any) (uint64, []any) {
	d, ok := v.(Described)
	if !ok {
		return 0, nil
	}
	l, _ := d.Value.([]any)
	return AsUint(d.Desc), l
}

// Pairs is the map of its arguments taken two at a time: key, value,
// key, value.
func Pairs(kvs ...any) Map {
	m := make(Map, 0, len(kvs)/2)
	for i := 0; i+1 < len(kvs); i += 2 {
		m = append(m, KV{kvs[i], kvs[i+1]})
	}
	return m
}
