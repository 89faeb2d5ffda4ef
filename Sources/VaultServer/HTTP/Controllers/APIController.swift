import Hummingbird

/// A controller of one area of the API: the service it calls on behalf of its handlers. Which route
/// group (open, session, admin) it is given decides who may reach it; see `buildRouter`.
protocol APIController: Sendable {
    typealias Context = VaultRequestContext

    var service: VaultService { get }
}
