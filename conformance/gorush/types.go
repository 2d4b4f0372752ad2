// Package gorush holds gorush's own request and answer types, copied from
// github.com/appleboy/gorush so that the conformance tests encode pushes
// exactly as a Go client of gorush does and decode the answers as it
// does. The Go module proxy does not serve gorush as a library, hence the
// copy.
//
// Copied from github.com/appleboy/gorush (MIT licence):
//
//	Copyright (c) 2016 Bo-Yi Wu
//
//	Permission is hereby granted, free of charge, to any person obtaining a copy
//	of this software and associated documentation files (the "Software"), to deal
//	in the Software without restriction, including without limitation the rights
//	to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
//	copies of the Software, and to permit persons to whom the Software is
//	furnished to do so, subject to the following conditions:
//
//	The above copyright notice and this permission notice shall be included in all
//	copies or substantial portions of the Software.
//
//	THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
//	IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
//	FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
//	AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
//	LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
//	OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
//	SOFTWARE.
//
// From where, at the commits read (2026-11-27):
//
//   - notify/notification.go (dab24387): D, Alert, RequestPush,
//     ResponsePush, PushNotification, FCMNotification, as they are there
//     but for PushNotification.HuaweiNotification, a
//     *model.AndroidNotification of github.com/msalihkarakasli/go-hms-push
//     there and raw JSON here, and the binding tags, which gin reads and
//     encoding/json ignores.
//   - logx/log.go (a493ed67): LogPushEntry.
//   - core/core.go (26de56a4): the platform and log type constants.
//   - router/server.go (0122f8fa): pushHandler answers gin.H{"success":
//     "ok", "counts": counts, "logs": logs} and abortWithError gin.H{"code":
//     code, "message": message}: Response and ErrorResponse are those
//     maps as structs, with the same JSON names.
package gorush

import "encoding/json"

// PlatFormIos, PlatFormAndroid and PlatFormHuawei are core.PlatForm*.
const (
	PlatFormIos = iota + 1
	PlatFormAndroid
	PlatFormHuawei
)

// SucceededPush and FailedPush are core's log types.
const (
	SucceededPush = "succeeded-push"
	FailedPush    = "failed-push"
)

// D provide string array
type D map[string]interface{}

// Alert is APNs payload
type Alert struct {
	Action          string   `json:"action,omitempty"`
	ActionLocKey    string   `json:"action-loc-key,omitempty"`
	Body            string   `json:"body,omitempty"`
	LaunchImage     string   `json:"launch-image,omitempty"`
	LocArgs         []string `json:"loc-args,omitempty"`
	LocKey          string   `json:"loc-key,omitempty"`
	Title           string   `json:"title,omitempty"`
	Subtitle        string   `json:"subtitle,omitempty"`
	TitleLocArgs    []string `json:"title-loc-args,omitempty"`
	TitleLocKey     string   `json:"title-loc-key,omitempty"`
	SummaryArg      string   `json:"summary-arg,omitempty"`
	SummaryArgCount int      `json:"summary-arg-count,omitempty"`
}

// RequestPush support multiple notification request.
type RequestPush struct {
	Notifications []PushNotification `json:"notifications"`
}

// ResponsePush response of notification request.
type ResponsePush struct {
	Logs []LogPushEntry `json:"logs"`
}

// PushNotification is single notification request
type PushNotification struct {
	// Common
	ID               string      `json:"notif_id,omitempty"`
	Tokens           []string    `json:"tokens"`
	Platform         int         `json:"platform"`
	Message          string      `json:"message,omitempty"`
	Title            string      `json:"title,omitempty"`
	Image            string      `json:"image,omitempty"`
	Priority         string      `json:"priority,omitempty"`
	ContentAvailable bool        `json:"content_available,omitempty"`
	MutableContent   bool        `json:"mutable_content,omitempty"`
	Sound            interface{} `json:"sound,omitempty"`
	Data             D           `json:"data,omitempty"`
	Retry            int         `json:"retry,omitempty"`

	// Android
	APIKey                string           `json:"api_key,omitempty"`
	To                    string           `json:"to,omitempty"`
	CollapseKey           string           `json:"collapse_key,omitempty"`
	TimeToLive            *uint            `json:"time_to_live,omitempty"`
	RestrictedPackageName string           `json:"restricted_package_name,omitempty"`
	DryRun                bool             `json:"dry_run,omitempty"`
	Condition             string           `json:"condition,omitempty"`
	Notification          *FCMNotification `json:"notification,omitempty"`

	// Huawei
	AppID              string          `json:"app_id,omitempty"`
	AppSecret          string          `json:"app_secret,omitempty"`
	HuaweiNotification json.RawMessage `json:"huawei_notification,omitempty"`
	HuaweiData         string          `json:"huawei_data,omitempty"`
	HuaweiCollapseKey  int             `json:"huawei_collapse_key,omitempty"`
	HuaweiTTL          string          `json:"huawei_ttl,omitempty"`
	BiTag              string          `json:"bi_tag,omitempty"`
	FastAppTarget      int             `json:"fast_app_target,omitempty"`

	// iOS
	Expiration  *int64   `json:"expiration,omitempty"`
	ApnsID      string   `json:"apns_id,omitempty"`
	CollapseID  string   `json:"collapse_id,omitempty"`
	Topic       string   `json:"topic,omitempty"`
	PushType    string   `json:"push_type,omitempty"`
	Badge       *int     `json:"badge,omitempty"`
	Category    string   `json:"category,omitempty"`
	ThreadID    string   `json:"thread-id,omitempty"`
	URLArgs     []string `json:"url-args,omitempty"`
	Alert       Alert    `json:"alert,omitempty"`
	Production  bool     `json:"production,omitempty"`
	Development bool     `json:"development,omitempty"`
	SoundName   string   `json:"name,omitempty"`
	SoundVolume float32  `json:"volume,omitempty"`
	Apns        D        `json:"apns,omitempty"`

	// ref: https://github.com/sideshow/apns2/blob/54928d6193dfe300b6b88dad72b7e2ae138d4f0a/payload/builder.go#L7-L24
	InterruptionLevel string `json:"interruption_level,omitempty"`
}

// FCMNotification specifies the predefined, user-visible key-value pairs of the
// notification payload.
type FCMNotification struct {
	Title        string   `json:"title,omitempty"`
	Body         string   `json:"body,omitempty"`
	ChannelID    string   `json:"android_channel_id,omitempty"`
	Icon         string   `json:"icon,omitempty"`
	Image        string   `json:"image,omitempty"`
	Sound        string   `json:"sound,omitempty"`
	Badge        string   `json:"badge,omitempty"`
	Tag          string   `json:"tag,omitempty"`
	Color        string   `json:"color,omitempty"`
	ClickAction  string   `json:"click_action,omitempty"`
	BodyLocKey   string   `json:"body_loc_key,omitempty"`
	BodyLocArgs  []string `json:"body_loc_args,omitempty"`
	TitleLocKey  string   `json:"title_loc_key,omitempty"`
	TitleLocArgs []string `json:"title_loc_args,omitempty"`
}

// LogPushEntry is push response log
type LogPushEntry struct {
	ID       string `json:"notif_id,omitempty"`
	Type     string `json:"type"`
	Platform string `json:"platform"`
	Token    string `json:"token"`
	Message  string `json:"message"`
	Error    string `json:"error"`
}

// Response is pushHandler's answer (gin.H{"success", "counts", "logs"}).
type Response struct {
	Counts  int            `json:"counts"`
	Logs    []LogPushEntry `json:"logs"`
	Success string         `json:"success"`
}

// ErrorResponse is abortWithError's answer (gin.H{"code", "message"}).
type ErrorResponse struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// PlatformName is logx.typeForPlatForm: the platform's name in a log.
func PlatformName(platform int) string {
	switch platform {
	case PlatFormIos:
		return "ios"
	case PlatFormAndroid:
		return "android"
	case PlatFormHuawei:
		return "huawei"
	default:
		return ""
	}
}
