import SyncAgentFuzzing

// libFuzzer's entry points. Built only by `make fuzz` (SYNCAGENT_FUZZ=1 and
// -sanitize=fuzzer), where libFuzzer supplies the driver.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafeRawPointer?, _ count: Int) -> CInt {
    FuzzTargets.run(UnsafeRawBufferPointer(start: data, count: count))
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafeRawPointer?, Int) -> CInt) -> CInt

/// SwiftPM links an executable's entry point under this name; here it
/// hands the command line to libFuzzer's driver.
@_cdecl("syncagent_fuzz_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { fuzzOneInput($0, $1) }
}
