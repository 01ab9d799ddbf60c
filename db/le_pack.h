/*
 * le_pack.h: little-endian packing of the store's blobs (token ids, packed
 * positions), whatever the host: a database file moves between machines.
 * db/'s private header (only db/ and tests/ include it), static inline.
 */
#ifndef PG_LE_PACK_H
#define PG_LE_PACK_H

#include <stdint.h>
#include <string.h>

/* Writes v at p (4 bytes). */
static inline void le_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The 4 bytes at p. */
static inline uint32_t le_get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

/* Writes v at p (4 bytes, two's complement). */
static inline void le_put_i32(unsigned char *p, int32_t v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    le_put_u32(p, u);
}

/* The int32 at p. */
static inline int32_t le_get_i32(const unsigned char *p)
{
    const uint32_t u = le_get_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Writes d at p (8 bytes, IEEE 754 binary64). */
static inline void le_put_f64(unsigned char *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The binary64 at p. */
static inline double le_get_f64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

#endif /* PG_LE_PACK_H */
