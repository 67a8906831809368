package debezium

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// A standalone Kafka Connect worker keeps its offsets in the file
// offset.storage.file.filename names: a java.util.HashMap<byte[],byte[]>
// written with Java serialization (FileOffsetBackingStore), each key and
// value the JSON of an offsets record. readOffsetsFile reads that one
// shape, as the Java Object Serialization Specification (chapter 6)
// writes it, and refuses anything else.

// Java serialization's type codes, and the stream's magic.
const (
	javaMagic         = 0xACED
	tcNull            = 0x70
	tcReference       = 0x71
	tcClassDesc       = 0x72
	tcObject          = 0x73
	tcString          = 0x74
	tcArray           = 0x75
	tcBlockData       = 0x77
	tcEndBlockData    = 0x78
	tcBlockDataLong   = 0x7A
	javaBaseHandle    = 0x7E0000
	scWriteMethod     = 0x01
	scSerializable    = 0x02
	hashMapClass      = "java.util.HashMap"
	byteArrayClass    = "[B"
	maxJavaAllocation = 1 << 30
)

// IsOffsetsFile reports whether b starts as Java serialization does.
func IsOffsetsFile(b []byte) bool {
	return len(b) >= 4 && binary.BigEndian.Uint16(b) == javaMagic && binary.BigEndian.Uint16(b[2:]) == 5
}

// ParseOffsetsFile reads a standalone worker's offsets file and picks the
// selected connector's offset.
func ParseOffsetsFile(b []byte, s Selector, where string) (Offset, error) {
	entries, err := readOffsetsFile(b)
	if errors.Is(err, errTruncated) {
		// FileOffsetBackingStore rewrites the file in place at each flush:
		// a worker killed in the middle of one leaves it cut short, every
		// offset in it lost, and Kafka Connect reads it as holding none.
		return Offset{}, fmt.Errorf("%w: %s is cut short (%d bytes), as a standalone worker killed while it rewrote its offsets leaves it, "+
			"and Kafka Connect reads it as holding no offsets", ErrNoOffset, where, len(b))
	}
	if err != nil {
		return Offset{}, fmt.Errorf("reading Kafka Connect's offsets file %s: %w", where, err)
	}
	latest := make(Latest)
	for _, e := range entries {
		latest.Add(e[0], e[1])
	}
	return latest.Choose(s, where)
}

// javaReader reads a serialization stream; handles are the objects and
// class descriptions read so far, by handle, as references name them.
type javaReader struct {
	b       []byte
	off     int
	handles []any
}

// classDesc is a class description: its name, flags and fields' type
// codes.
type classDesc struct {
	name   string
	flags  byte
	fields []byte
}

var errTruncated = errors.New("truncated")

func (r *javaReader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, fmt.Errorf("%w at byte %d", errTruncated, r.off)
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p, nil
}

func (r *javaReader) u8() (byte, error) {
	p, err := r.take(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

func (r *javaReader) u16() (int, error) {
	p, err := r.take(2)
	if err != nil {
		return 0, err
	}
	return int(binary.BigEndian.Uint16(p)), nil
}

func (r *javaReader) u32() (int, error) {
	p, err := r.take(4)
	if err != nil {
		return 0, err
	}
	return int(int32(binary.BigEndian.Uint32(p))), nil
}

func (r *javaReader) utf() (string, error) {
	n, err := r.u16()
	if err != nil {
		return "", err
	}
	p, err := r.take(n)
	return string(p), err
}

func (r *javaReader) newHandle(v any) { r.handles = append(r.handles, v) }

func (r *javaReader) reference() (any, error) {
	h, err := r.u32()
	if err != nil {
		return nil, err
	}
	i := h - javaBaseHandle
	if i < 0 || i >= len(r.handles) {
		return nil, fmt.Errorf("reference to unknown handle %#x at byte %d", h, r.off-4)
	}
	return r.handles[i], nil
}

// classDesc reads a class description: new, a reference, or null.
func (r *javaReader) classDesc() (*classDesc, error) {
	tc, err := r.u8()
	if err != nil {
		return nil, err
	}
	switch tc {
	case tcNull:
		return nil, nil
	case tcReference:
		return referenced[*classDesc](r, "class description")
	case tcClassDesc:
	default:
		return nil, fmt.Errorf("type code %#x at byte %d where a class description belongs", tc, r.off-1)
	}
	cd := &classDesc{}
	if cd.name, err = r.utf(); err != nil {
		return nil, err
	}
	if _, err := r.take(8); err != nil { // serialVersionUID
		return nil, err
	}
	r.newHandle(cd)
	if cd.flags, err = r.u8(); err != nil {
		return nil, err
	}
	n, err := r.u16()
	if err != nil {
		return nil, err
	}
	for range n {
		code, err := r.u8()
		if err != nil {
			return nil, err
		}
		if _, err := r.utf(); err != nil { // the field's name
			return nil, err
		}
		if code == 'L' || code == '[' {
			return nil, fmt.Errorf("class %s has object fields, which an offsets file's classes do not", cd.name)
		}
		cd.fields = append(cd.fields, code)
	}
	// Class annotations: none are written for these classes.
	if tc, err := r.u8(); err != nil || tc != tcEndBlockData {
		return nil, errors.Join(err, fmt.Errorf("class %s has annotations, which an offsets file's classes do not", cd.name))
	}
	super, err := r.classDesc()
	if err != nil {
		return nil, err
	}
	if super != nil {
		return nil, fmt.Errorf("class %s has a serializable superclass %s, which an offsets file's classes do not", cd.name, super.name)
	}
	return cd, nil
}

// primitiveSize is the size of a primitive field of type code c.
func primitiveSize(c byte) (int, error) {
	switch c {
	case 'B', 'Z':
		return 1, nil
	case 'C', 'S':
		return 2, nil
	case 'F', 'I':
		return 4, nil
	case 'D', 'J':
		return 8, nil
	}
	return 0, fmt.Errorf("field type code %q", c)
}

// referenced reads a reference to a T read before; what names a T in the
// error when the reference names something else.
func referenced[T any](r *javaReader, what string) (T, error) {
	var zero T
	v, err := r.reference()
	if err != nil {
		return zero, err
	}
	t, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("reference at byte %d names no %s", r.off-4, what)
	}
	return t, nil
}

// bytesOrNull reads a byte[] (new or a reference to one read before) or
// null.
func (r *javaReader) bytesOrNull(tc byte) ([]byte, error) {
	switch tc {
	case tcNull:
		return nil, nil
	case tcReference:
		return referenced[[]byte](r, "byte array")
	case tcArray:
	default:
		return nil, fmt.Errorf("type code %#x at byte %d where a byte array belongs", tc, r.off-1)
	}
	cd, err := r.classDesc()
	if err != nil {
		return nil, err
	}
	if cd == nil || cd.name != byteArrayClass {
		return nil, fmt.Errorf("an array at byte %d is not a byte[]", r.off)
	}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > maxJavaAllocation {
		return nil, fmt.Errorf("byte[] of %d bytes at byte %d", n, r.off-4)
	}
	p, err := r.take(n)
	if err != nil {
		return nil, err
	}
	b := bytes.Clone(p)
	r.newHandle(b)
	return b, nil
}

// readOffsetsFile reads the HashMap's entries, key and value, in the
// order they were written.
func readOffsetsFile(b []byte) ([][2][]byte, error) {
	if !IsOffsetsFile(b) {
		return nil, errors.New("not a Java serialization stream (no 0xACED0005 at its start)")
	}
	r := &javaReader{b: b, off: 4}
	if tc, err := r.u8(); err != nil || tc != tcObject {
		return nil, errors.Join(err, errors.New("the stream does not start with an object"))
	}
	cd, err := r.classDesc()
	if err != nil {
		return nil, err
	}
	if cd == nil || cd.name != hashMapClass || cd.flags&(scWriteMethod|scSerializable) != scWriteMethod|scSerializable {
		return nil, errors.New("the object is not a java.util.HashMap")
	}
	r.newHandle(nil) // the map itself
	for _, f := range cd.fields {
		n, err := primitiveSize(f)
		if err != nil {
			return nil, err
		}
		if _, err := r.take(n); err != nil {
			return nil, err
		}
	}
	// HashMap.writeObject: its capacity and size as block data, then each
	// key and value as an object, then the end of the annotation.
	var block []byte
	var objects [][]byte
	for {
		tc, err := r.u8()
		if err != nil {
			return nil, err
		}
		switch tc {
		case tcEndBlockData:
			if len(block) < 8 {
				return nil, errors.New("the map's size is missing")
			}
			size := int(int32(binary.BigEndian.Uint32(block[4:8])))
			if size < 0 || len(objects) != 2*size {
				return nil, fmt.Errorf("the map says it holds %d entries, the stream has %d objects", size, len(objects))
			}
			if r.off != len(r.b) {
				return nil, fmt.Errorf("%d bytes after the map", len(r.b)-r.off)
			}
			out := make([][2][]byte, size)
			for i := range out {
				out[i] = [2][]byte{objects[2*i], objects[2*i+1]}
			}
			return out, nil
		case tcBlockData:
			n, err := r.u8()
			if err != nil {
				return nil, err
			}
			p, err := r.take(int(n))
			if err != nil {
				return nil, err
			}
			block = append(block, p...)
		case tcBlockDataLong:
			n, err := r.u32()
			if err != nil {
				return nil, err
			}
			p, err := r.take(n)
			if err != nil {
				return nil, err
			}
			block = append(block, p...)
		case tcString:
			return nil, fmt.Errorf("a string at byte %d: the map's keys and values are byte arrays", r.off-1)
		default:
			o, err := r.bytesOrNull(tc)
			if err != nil {
				return nil, err
			}
			objects = append(objects, o)
		}
	}
}
