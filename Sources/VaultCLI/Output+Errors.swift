import Foundation
import VaultClient

extension Output {
    /// An error in plain words and neutralised, for a line a command prints itself (one failed item of
    /// many); the tool's runner words the error that ends a command.
    public static func plain(_ error: any Error) -> String {
        if let e = error as? CLIError { return printable(e.message) }
        return printable(ToolRunner.describe(ClientError.from(error)).0)
    }
}
