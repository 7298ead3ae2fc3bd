// A stand-in for the SFPI toolchain's `lltt.h` (low-level Tensix: the replay buffer), written for
// ttdecode's mock Wormhole from the public SFPI documentation. Signatures only, no semantics:
// record<Exec|NoExec>(start, length) records the next `length` Tensix instructions into the
// replay buffer at `start` (executing them too with Exec); replay(start, length) issues them
// again; replay_insn(start, length) is the encoded REPLAY instruction word.
#pragma once

namespace lltt {

enum ExecBool : bool { NoExec = false, Exec = true };

template <ExecBool E = NoExec>
inline void record(unsigned int start, unsigned int length) {
    (void)start;
    (void)length;
}

inline void replay(unsigned int start, unsigned int length) {
    (void)start;
    (void)length;
}

inline constexpr unsigned int replay_insn(unsigned int start, unsigned int length) {
    return (start << 14) | (length << 4);
}

}  // namespace lltt
