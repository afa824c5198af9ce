// FuseAdapter+Interrupts: FUSE interrupts. A process blocked in a request that waits on the
// store (open, read, a lookup that lists, create, unlink, rename, fsync) and gets a signal
// (Ctrl-C, SIGKILL) makes the kernel send FUSE_INTERRUPT; libfuse calls the function
// registered with `fuse_req_interrupt_func`, which cancels the request's Swift task. The wait
// the task is in (`CallerWait`) then ends with `EINTR`, and the task replies that (once: the
// reply still goes through `FuseRequest`). Without this the process stays in D state, deaf
// even to SIGKILL, for as long as the store keeps it waiting.
//
// libfuse's rules, kept here: the callback runs on another libfuse thread; it may run from
// inside `fuse_req_interrupt_func` when the interrupt came first; and it may still run just
// after the request was answered. So it carries no pointer of ours, only the request's id in
// `InFlightRequests` (as a pointer's bit pattern), and finds the adapter through the request's
// session userdata, which outlives every request.
import CFuse
import DocFSCore
import Glibc

extension FuseAdapter {
    /// Registers the interrupt of `req` as the cancellation of the task reserved as `id`.
    /// Called before that task starts, while nothing can answer (and free) the request.
    func registerInterrupt(_ req: fuse_req_t, id: UInt64) {
        fuse_req_interrupt_func(req, { req, data in
            guard let req, let userdata = fuse_req_userdata(req) else { return }
            let adapter = Unmanaged<FuseAdapter>.fromOpaque(userdata).takeUnretainedValue()
            adapter.inFlight.interrupt(UInt64(UInt(bitPattern: data)))
        }, UnsafeMutableRawPointer(bitPattern: UInt(id)))
    }

    /// Runs core work that changes the store or the catalog (create, unlink, rename, an upload
    /// fsync waits for, a listing others share) in a task of its own, so that an interrupt never
    /// stops it half done: the caller's wait ends with `EINTR` at once, the work finishes
    /// unobserved, and `abandoned` gets a result nobody took (a handle to close).
    func shielded<T: Sendable>(_ work: @escaping @Sendable () async throws(FSError) -> T,
                               abandoned: (@Sendable (T) -> Void)? = nil) async throws(FSError) -> T {
        try await CallerWait.run(limit: nil, work, abandoned: abandoned)
    }
}
