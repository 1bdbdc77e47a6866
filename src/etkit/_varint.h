/* Protobuf's base-128 varint, written: the one home of the encoding for etkit's C kernels that write records
 * (each includes this after Python.h and stdint.h). The readers decode it where they walk the bytes. */
#ifndef ETKIT_VARINT_H
#define ETKIT_VARINT_H

/* Bytes of v as a varint (1 to 10). */
static inline int varint_len(uint64_t v) {
    int n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

/* Write v at p as a varint (up to 10 bytes); returns the byte after it. */
static inline char *put_varint(char *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (char)((v & 0x7F) | 0x80); v >>= 7; }
    *p++ = (char)v;
    return p;
}

#endif
