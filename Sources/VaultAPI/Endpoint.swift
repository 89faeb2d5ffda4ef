import VaultCore

/// One route of the API said once: its method, its path and the types of its request body and answer.
/// The client's typed calls (`Transport.send(_:_:auth:)`) take one, so a call site names neither the
/// method nor the path nor the answer's type again (openapi.yaml describes each route).
public struct Endpoint<Body: Encodable & Sendable, Answer: Decodable & Sendable>: Sendable {
    public let method: EndpointMethod
    /// The path, with its query when one is given.
    public let path: String

    public init(_ method: EndpointMethod, _ path: String, body: Body.Type = Body.self, answer: Answer.Type = Answer.self) {
        self.method = method
        self.path = path
    }

    /// The same route with `query` (`after=3&limit=500`, its values already safe in a URL).
    public func query(_ query: String) -> Endpoint { Endpoint(method, path + "?" + query) }

    /// The same route read as `type`, a type of the caller's that decodes the same answer.
    public func answer<T: Decodable & Sendable>(as type: T.Type) -> Endpoint<Body, T> { Endpoint<Body, T>(method, path) }
}

/// The HTTP method of an endpoint, as its name.
public enum EndpointMethod: String, Sendable {
    case GET, POST, PUT
}

/// The body of a request that sends none.
public struct NoBody: Encodable, Sendable {
    public init() {}
}

/// An empty JSON object, `{}`, for a route that takes a body with nothing in it.
public struct EmptyObject: Codable, Sendable {
    public init() {}
}

/// An answer with nothing worth reading (`204`, or one a caller does not use): never decoded.
public struct NoAnswer: Decodable, Sendable {
    public init(from decoder: any Decoder) throws {}
    public init() {}
}

/// The routes of each area as endpoints (Routes holds their paths, shared with the server's router).
public enum AccountEndpoints {
    public static let register = Endpoint<RegistrationSubmission, RegisterResponse>(.POST, Routes.register)
    public static let loginParameters = Endpoint<LoginParametersRequest, LoginParametersResponse>(.POST, Routes.loginParameters)
    public static let login = Endpoint<LoginRequest, LoginResponse>(.POST, Routes.login)
    public static let logout = Endpoint<NoBody, NoAnswer>(.POST, Routes.logout)
    public static let passwordChange = Endpoint<PasswordChangeRequest, NoAnswer>(.POST, Routes.passwordChange)
    public static let recoveryRotate = Endpoint<RecoveryRotationRequest, NoAnswer>(.POST, Routes.recoveryRotate)
    public static let recoveryBundle = Endpoint<RecoveryProof, RecoveryBundleResponse>(.POST, Routes.recoveryBundle)
    public static let recover = Endpoint<RecoveryRequest, NoAnswer>(.POST, Routes.recover)
    public static let sessions = Endpoint<NoBody, SessionList>(.GET, Routes.sessions)
    public static let revokeOtherSessions = Endpoint<NoBody, RevokedSessions>(.POST, Routes.sessionsRevokeOthers)
    public static func revokeSession(_ id: String) -> Endpoint<NoBody, RevokedSessions> { Endpoint(.POST, Routes.sessionRevoke(id)) }
    public static let deleteAccount = Endpoint<DeleteAccountRequest, DeleteAccountResponse>(.POST, Routes.deleteAccount)
    /// The caller's own certificate, as the session's server holds it.
    public static let me = Endpoint<NoBody, DirectoryEntry>(.GET, Routes.me)
}

/// The admin's routes, each signed with the admin key (Docs/envelope-v1.md §3.5), and the deployment id they name.
public enum AdminEndpoints {
    public static let deployment = Endpoint<NoBody, DeploymentResponse>(.GET, Routes.deployment)
    public static let pending = Endpoint<NoBody, PendingResponse>(.GET, Routes.adminPending)
    public static func approveRegistration(_ userID: String) -> Endpoint<ApproveRegistrationRequest, UserSummary> {
        Endpoint(.POST, Routes.adminApproveRegistration(userID))
    }
    public static func rejectRegistration(_ userID: String) -> Endpoint<RejectRequest, UserSummary> {
        Endpoint(.POST, Routes.adminRejectRegistration(userID))
    }
    public static func approveShare(_ shareID: String) -> Endpoint<ApproveShareRequest, ShareInfo> {
        Endpoint(.POST, Routes.adminApproveShare(shareID))
    }
    public static func rejectShare(_ shareID: String) -> Endpoint<RejectRequest, ShareInfo> { Endpoint(.POST, Routes.adminRejectShare(shareID)) }
    public static let users = Endpoint<NoBody, UserList>(.GET, Routes.adminUsers)
    public static let audit = Endpoint<NoBody, AuditPage>(.GET, Routes.adminAudit)
    public static let auditVerify = Endpoint<NoBody, AuditVerification>(.GET, Routes.adminAuditVerify)
    public static let auditCheckpoints = Endpoint<NoBody, AuditCheckpointList>(.GET, Routes.adminAuditCheckpoints)
    public static let signCheckpoint = Endpoint<AuditCheckpoint, AuditCheckpoint>(.POST, Routes.adminAuditCheckpoints)
    public static func suspend(_ userID: String) -> Endpoint<SuspendRequest, SuspensionResponse> { Endpoint(.POST, Routes.adminSuspend(userID)) }
    public static func reinstate(_ userID: String) -> Endpoint<EmptyObject, SuspensionResponse> { Endpoint(.POST, Routes.adminReinstate(userID)) }
}

/// A patient's access log (Docs/design.md §6).
public enum AccessLogEndpoints {
    public static let entries = Endpoint<NoBody, AuditPage>(.GET, Routes.accessLog)
    public static let checkpoints = Endpoint<NoBody, AuditCheckpointList>(.GET, Routes.accessLogCheckpoints)
    public static let chain = Endpoint<NoBody, AuditLinkPage>(.GET, Routes.accessLogChain)
}

/// Shares between a patient and a doctor (Docs/design.md §3).
public enum ShareEndpoints {
    public static let list = Endpoint<NoBody, ShareList>(.GET, Routes.shares)
    public static let create = Endpoint<CreateShareRequest, ShareInfo>(.POST, Routes.shares)
    public static func revoke(_ shareID: String) -> Endpoint<RevokeShareRequest, ShareInfo> { Endpoint(.POST, Routes.shareRevoke(shareID)) }
    public static func updateGrant(_ shareID: String) -> Endpoint<UpdateShareGrantRequest, ShareInfo> { Endpoint(.PUT, Routes.shareGrant(shareID)) }
    /// A doctor's patients: those with a share naming the doctor.
    public static let doctorPatients = Endpoint<NoBody, PatientList>(.GET, Routes.doctorPatients)
}

/// A patient's tresors and their self-grants (Docs/design.md §2).
public enum TresorEndpoints {
    public static let list = Endpoint<NoBody, TresorList>(.GET, Routes.tresors)
    public static let put = Endpoint<PutTresorRequest, TresorInfo>(.PUT, Routes.tresors)
}

/// The directory of approved users and their certificates.
public enum DirectoryEndpoints {
    public static func user(named username: String) -> Endpoint<NoBody, DirectoryEntry> { Endpoint(.GET, Routes.userByName(username)) }
    public static func user(id: String) -> Endpoint<NoBody, DirectoryEntry> { Endpoint(.GET, Routes.userByID(id)) }
}
