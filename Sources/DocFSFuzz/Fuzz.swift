// docfs-fuzz: the parsers of what another party wrote (the WebDAV multistatus stream, S3
// answers, HTTP dates, and what `docfs serve` reads of a request) under libFuzzer (issue 10,
// item 10). `make fuzz` builds it with `-sanitize=fuzzer` in a scratch path of its own and
// runs it; `make test` runs the same parsers under a seeded generator instead.
//
// Built without FUZZING (every `swift build`), it is a replayer: `docfs-fuzz FILE|DIR...` runs
// each input as libFuzzer would, so a crash libFuzzer saved can be rerun under a debugger.

import DocFSServe
import DocFSStores
import Foundation

/// One input: its first byte picks the parser, the rest is what it reads.
func fuzzOne(_ bytes: [UInt8]) {
    guard let selector = bytes.first else { return }
    let input = Array(bytes.dropFirst())
    switch selector % 4 {
    case 0: ParserFuzzing.multistatus(input)
    case 1: ParserFuzzing.s3Answers(input)
    case 2: ParserFuzzing.httpDate(input)
    default: RequestFuzzing.pathAndHeaders(input)
    }
}

#if FUZZING
/// libFuzzer's driver, from its runtime (`-sanitize=fuzzer`). SwiftPM links an executable's
/// `@main` as the program's `main`, so the driver is started from there rather than from the
/// runtime's own `main`.
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(_ argc: UnsafeMutablePointer<Int32>,
                     _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
                     _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32

/// What libFuzzer calls with each input (also named so, for the runtime's own `main`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    fuzzOne(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

@main
enum Fuzz {
    static func main() {
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(runFuzzerDriver(&argc, &argv) { data, size in fuzzerTestOneInput(data, size) })
    }
}
#else
@main
enum Replay {
    static func main() {
        let paths = CommandLine.arguments.dropFirst()
        guard !paths.isEmpty else {
            FileHandle.standardError.write(Data("usage: docfs-fuzz FILE|DIR... (make fuzz runs it under libFuzzer)\n".utf8))
            exit(2)
        }
        var count = 0
        for path in paths {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                FileHandle.standardError.write(Data("docfs-fuzz: no such file: \(path)\n".utf8))
                exit(1)
            }
            let files = isDirectory.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
                : [path]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                fuzzOne(Array(data))
                count += 1
            }
        }
        print("docfs-fuzz: \(count) input(s) replayed, no crash")
    }
}
#endif
