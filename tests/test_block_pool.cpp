// The per-thread pool of fixed-size blocks behind zero-copy sends: blocks
// go back to their pool from any thread, and a pool outlives its thread
// until its last block is back.
#include "transport/block_pool.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

using namespace tenbin;

TEST_CASE("block pool: blocks come back from any thread and are handed out again") {
    using detail::block_pool;
    const std::size_t pools_before = block_pool::live();

    SUBCASE("given back from another thread, taken again by the owner") {
        std::thread([] {
            block_pool* pool = block_pool::of_this_thread();
            REQUIRE(pool);
            CHECK(block_pool::of_this_thread() == pool);
            std::set<void*> taken;
            for (int i = 0; i < 8; ++i) taken.insert(pool->take());
            CHECK(taken.size() == 8);
            CHECK(pool->owned() == 8);
            std::thread([&] {
                for (void* b : taken) block_pool::give_back(pool, b);
            }).join();
            std::set<void*> again;
            for (int i = 0; i < 8; ++i) again.insert(pool->take());
            CHECK(again == taken);
            CHECK(pool->owned() == 8);  // none allocated anew
            for (void* b : again) block_pool::give_back(pool, b);
        }).join();
        CHECK(block_pool::live() == pools_before);
    }
    SUBCASE("a pool outlives its thread until its last block is back") {
        block_pool* pool = nullptr;
        std::vector<void*> out;
        std::thread([&] {
            pool = block_pool::of_this_thread();
            for (int i = 0; i < 3; ++i) out.push_back(pool->take());
            block_pool::give_back(pool, pool->take());
        }).join();
        CHECK(block_pool::live() == pools_before + 1);
        for (void* b : out) {
            std::memset(b, 0xab, block_pool::block_bytes);  // the whole block is the caller's
            block_pool::give_back(pool, b);
        }
        CHECK(block_pool::live() == pools_before);
    }
    SUBCASE("past 1024 blocks, each one handed out frees a spare") {
        std::thread([] {
            block_pool* pool = block_pool::of_this_thread();
            std::vector<void*> out;
            for (int i = 0; i < 1100; ++i) out.push_back(pool->take());
            for (void* b : out) block_pool::give_back(pool, b);
            out.clear();
            for (int i = 0; i < 500; ++i) out.push_back(pool->take());
            CHECK(pool->owned() == 1024);
            for (void* b : out) block_pool::give_back(pool, b);
        }).join();
        CHECK(block_pool::live() == pools_before);
    }
    SUBCASE("blocks given back by several threads while the owner takes more") {
        std::thread([] {
            block_pool* pool = block_pool::of_this_thread();
            for (int round = 0; round < 50; ++round) {
                std::vector<void*> out;
                for (int i = 0; i < 30; ++i) out.push_back(pool->take());
                std::vector<std::atomic<bool>> back(out.size());
                std::vector<std::thread> returners;
                for (std::size_t t = 0; t < 3; ++t)
                    returners.emplace_back([&, t] {
                        for (std::size_t i = t; i < out.size(); i += 3) {
                            back[i] = true;
                            block_pool::give_back(pool, out[i]);
                        }
                    });
                // A block is handed out again only once it is back.
                std::set<void*> held;
                for (int i = 0; i < 30; ++i) held.insert(pool->take());
                CHECK(held.size() == 30);
                for (std::size_t i = 0; i < out.size(); ++i)
                    if (held.count(out[i])) CHECK(back[i]);
                for (std::thread& r : returners) r.join();
                for (void* b : held) block_pool::give_back(pool, b);
            }
            CHECK(pool->owned() <= 90);
        }).join();
        CHECK(block_pool::live() == pools_before);
    }
}
