/* CRC-32C (Castagnoli), the checksum of every pylog batch: hardware (SSE4.2) where the CPU has it, a
 * slicing-by-8 table otherwise. Same results as the `crc32c` package the pure-Python path uses. */
#ifndef PYLOG_CRC32C_H
#define PYLOG_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* CRC-32C of `len` bytes at `data`, continuing from `crc` (0 to start). */
uint32_t pylog_crc32c(uint32_t crc, const void *data, size_t len);
/* Set up the tables and pick the implementation; called once from the module's init. */
void pylog_crc32c_init(void);

#endif
