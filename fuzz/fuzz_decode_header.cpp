// libFuzzer target: decode_header over arbitrary bytes. An accepted header
// must be consistent (size, rank, byte count computed without overflow) and
// re-encode to exactly the input (but for leading NULs of its info).
#include "common.hpp"

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const tenbin::bytes_view input(reinterpret_cast<const std::byte*>(data), size);
    for (int round = 0; round < 2; ++round) {
        const tenbin::limits lim = round == 0 ? tenbin::limits{} : fuzz::small_limits();
        tenbin::tensor_header h;
        try {
            h = tenbin::decode_header(input, lim);
        } catch (const tenbin::error& e) {
            fuzz::check_error(e);
            continue;
        }
        if (tenbin::header_size(h.shape.size()) != size) fuzz::fail("header size does not match the rank");
        if (h.shape.size() > lim.max_rank) fuzz::fail("rank above limits::max_rank accepted");
        if (h.nbytes > lim.max_bytes) fuzz::fail("byte count above limits::max_bytes accepted");
        unsigned __int128 n = tenbin::itemsize(h.dtype);
        bool zero = false;
        for (std::int64_t d : h.shape) {
            if (d < 0) fuzz::fail("negative dimension accepted");
            zero = zero || d == 0;
            if (!zero && n <= static_cast<unsigned __int128>(UINT64_MAX)) n *= static_cast<std::uint64_t>(d);
        }
        if (zero) n = 0;
        if (n != h.nbytes) fuzz::fail("nbytes is not prod(shape) * itemsize");
        for (char c : h.info)
            if (static_cast<unsigned char>(c) > 127) fuzz::fail("non-ASCII info accepted");
        if (!h.info.empty() && (h.info.front() == 0 || h.info.back() == 0))
            fuzz::fail("info keeps a NUL at an end (decoders strip them, as Python does)");

        // Canonical: encoding the decoded header gives the input back. The
        // encoder wants data, so describe an empty buffer with a zero-size
        // shape of the same rank when the tensor is not empty.
        tenbin::tensor_view v;
        v.dtype = h.dtype;
        v.info = h.info;
        v.shape = h.shape;
        if (h.nbytes == 0) {
            std::vector<std::byte> out(size);
            try {
                tenbin::encode_header_into(v, out);
            } catch (const tenbin::error& e) {
                fuzz::fail("decoded header cannot be encoded:", e.what());
            }
            if (!fuzz::same_header(input, out)) fuzz::fail("header is not canonical");
        }
    }
    return 0;
}
